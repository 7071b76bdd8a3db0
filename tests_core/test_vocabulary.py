"""The catalogue of event types and audit actions is the whole vocabulary the core writes."""

from __future__ import annotations

import pytest

from orderflow_core.model import AuditEntry
from orderflow_core.vocabulary import AUDIT_ACTIONS, EVENT_TYPES
from tests_core.scenarios import SCENARIOS
from tests_core.world import OPERATOR, World


@pytest.mark.parametrize("version", [1, 2])
def test_every_scenario_writes_only_catalogued_events_and_audit_actions(version: int) -> None:
    events: set[str] = set()
    actions: set[str] = set()
    for scenario in SCENARIOS.values():
        w = World(process_version=version)
        try:
            order_id = scenario(w)
            w.publish()
            feed = w.run(w.service.events(OPERATOR, after=0, limit=1000))
            events |= {e.type for e in feed}
            audit: list[AuditEntry] = w.run(w.service.audit(OPERATOR, order_id))
            actions |= {a.action for a in audit}
        finally:
            w.close()
    assert events <= EVENT_TYPES, events - EVENT_TYPES
    assert actions <= AUDIT_ACTIONS, actions - AUDIT_ACTIONS
    # The scenarios exercise most of it: a name nobody writes would be a stale entry.
    assert len(events) >= 15
    assert {"order.needs_attention", "reservation.released", "refund.succeeded"} <= events
    if version == 2:
        assert "customer.notified" in events
