"""orderflow's composition root: configuration, wiring and the `orderflow` command line."""

from __future__ import annotations

from importlib import metadata

# The distribution's name on the package index (what `pip install` takes): `orderflow` there is an
# unrelated project. The import packages and the `orderflow` command keep their names.
DISTRIBUTION = "durable-orderflow"


def version() -> str:
    """The installed distribution's version (what `orderflow --version` prints)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"
