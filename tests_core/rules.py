"""The six rules as checks over a snapshot: they live in the property-testing kit
(`orderflow_testing.rules`) so embedders judge their own stores by them too."""

from __future__ import annotations

from orderflow_testing.rules import (
    OrderRecord,
    Snapshot,
    check_all_rules,
    check_snapshot,
    read_events,
    take_snapshot,
)

__all__ = [
    "OrderRecord",
    "Snapshot",
    "check_all_rules",
    "check_snapshot",
    "read_events",
    "take_snapshot",
]
