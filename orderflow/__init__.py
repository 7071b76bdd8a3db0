"""orderflow's composition root: configuration, wiring and the `orderflow` command line."""

from __future__ import annotations
