"""The simulator's journal entries: a simulator rebuilt from what it journaled knows every
effect and stored answer, so a repeated call is a replay, never a second effect."""

from __future__ import annotations

import json
from typing import Any

from orderflow_mocks.simulation import Simulator
from tests_core.sim_requests import CHARGE_KEY, body_for, call, make_sim


def _journaled() -> tuple[Simulator, list[dict[str, Any]]]:
    written: list[dict[str, Any]] = []
    sim = make_sim()
    # Through JSON, as a journal file would keep them.
    sim.journal = lambda entries: written.extend(json.loads(json.dumps(entries)))
    return sim, written


def _busy_day(sim: Simulator) -> str:
    call(sim, "warehouse", "reserve", key="reserve-key")
    charged = call(sim, "payments", "charge", key=CHARGE_KEY)
    reference = str(charged.body["payment_reference"])
    call(sim, "payments", "refund", key="refund-key", body=body_for("refund", reference))
    call(sim, "shipping", "ship", key="ship-key")
    call(sim, "warehouse", "release", key="release-key")
    sim.script("payments", "charge", ["pending"])
    call(sim, "payments", "charge", key="pending-key")
    sim.settle("pending-key", "succeeded")
    call(sim, "payments", "charge", key=CHARGE_KEY)  # a replay
    return reference


def test_a_simulator_restored_from_its_journal_has_the_same_ledger() -> None:
    sim, written = _journaled()
    _busy_day(sim)
    restored = make_sim()
    restored.restore(written)
    assert restored.ledger() == sim.ledger()


def test_a_restored_simulator_replays_a_repeated_charge_instead_of_charging_again() -> None:
    sim, written = _journaled()
    reference = _busy_day(sim)
    restored = make_sim()
    restored.restore(written)
    again = call(restored, "payments", "charge", key=CHARGE_KEY)
    assert (again.status, again.body["payment_reference"], again.effect_applied) == (
        201,
        reference,
        False,
    )
    assert call(restored, "payments", "status").body["payment_reference"] == reference
    charges = restored.ledger()["effects"]["charges"]
    assert [c["idempotency_key"] for c in charges] == [CHARGE_KEY, "pending-key"]


def test_entries_describe_the_whole_state_for_a_fresh_journal() -> None:
    sim, _ = _journaled()
    _busy_day(sim)
    restored = make_sim()
    restored.restore(sim.entries())
    assert restored.ledger() == sim.ledger()


def test_a_journaled_reset_forgets_what_came_before_it() -> None:
    sim, written = _journaled()
    _busy_day(sim)
    sim.reset()
    call(sim, "shipping", "ship", key="after-reset")
    restored = make_sim()
    restored.restore(written)
    assert restored.ledger() == sim.ledger()
    assert [s["idempotency_key"] for s in restored.ledger()["effects"]["shipments"]] == [
        "after-reset"
    ]
