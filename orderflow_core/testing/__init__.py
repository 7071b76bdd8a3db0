"""In-memory adapters and a fake clock, shipped with the core for embedding and tests."""

from __future__ import annotations

from orderflow_core.testing.clock import FakeClock
from orderflow_core.testing.memory import InMemoryOrderStore, InMemoryUsers, NoWakeUps

__all__ = ["FakeClock", "InMemoryOrderStore", "InMemoryUsers", "NoWakeUps"]
