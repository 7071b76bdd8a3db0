"""orderflow's composition root: the `orderflow` command (serve, worker, api, migrate, seed,
mocks, user), its configuration from the environment, and the wiring of the core to its
PostgreSQL, HTTP and NATS adapters."""

from __future__ import annotations

# The release's version: pyproject.toml reads it from here (one source of truth), and
# `orderflow --version` prints it. CHANGELOG.md has a section per version.
__version__ = "0.1.0"

# The distribution's name on the package index (what `pip install` takes): `orderflow` there is an
# unrelated project. The import packages and the `orderflow` command keep their names.
DISTRIBUTION = "durable-orderflow"


def version() -> str:
    """This release's version (what `orderflow --version` prints)."""
    return __version__
