"""orderflow's composition root: configuration, wiring and the `orderflow` command line."""

from __future__ import annotations

from importlib import metadata


def version() -> str:
    """The installed distribution's version (what `orderflow --version` prints)."""
    try:
        return metadata.version("orderflow")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"
