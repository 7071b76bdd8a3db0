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


def test_statuses_read_back_as_their_enums_and_an_unknown_one_is_refused() -> None:
    import attrs

    from orderflow_core.model import Attempt
    from orderflow_core.states import AttemptOutcome, PaymentStatus, ReservationStatus

    w = World()
    try:
        order = w.load(w.create()).order
    finally:
        w.close()
    stored = attrs.evolve(order, payment_status="unknown", reservation_status="held")
    assert stored.payment_status is PaymentStatus.UNKNOWN
    assert stored.reservation_status is ReservationStatus.HELD
    with pytest.raises(ValueError, match="in_doubt"):
        attrs.evolve(order, payment_status="in_doubt")
    attempt = Attempt(1, order.created_at, "w", outcome="not_charged")
    assert attempt.outcome is AttemptOutcome.NOT_CHARGED
    assert Attempt(1, order.created_at, "w").outcome is None
