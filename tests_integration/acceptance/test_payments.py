"""Money in doubt on the real stack: lost responses, timeouts, pending charges and the
15-minute reservation, with the provider's ledger as the witness."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from acceptance.stack import Stack
from orderflow_core import OrderState, StepKind

pytestmark = pytest.mark.postgres
S = OrderState
TTL_S = 900


def _calls(stack: Stack, order_id: UUID, operation: str | None = None) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = stack.ledger(order_id)["calls"]
    return [c for c in calls if operation is None or c["operation"] == operation]


def _charge_key(stack: Stack, order_id: UUID) -> str:
    charge = stack.load(order_id).latest(StepKind.CHARGE)
    assert charge is not None
    return charge.idempotency_key


def _to_payment_unknown(stack: Stack, outcome: str) -> UUID:
    order_id = stack.create()
    stack.sim.script("payments", "charge", [outcome], order_id=str(order_id))
    stack.step()  # reserve
    stack.step()  # charge: the answer never arrives
    assert stack.state(order_id) is S.PAYMENT_UNKNOWN
    return order_id


def test_a_lost_response_goes_payment_unknown_then_reconciliation_finds_it_paid_with_one_charge(
    stack: Stack,
) -> None:
    order_id = _to_payment_unknown(stack, "lost_response")
    stack.settle()
    assert stack.state(order_id) is S.SHIPPED
    visited = [b for _, b in stack.states_visited(order_id)]
    assert visited[visited.index("payment_unknown") + 1] == "paid"
    assert len(stack.charges(order_id)) == 1
    assert [c["operation"] for c in _calls(stack, order_id, None)].count("charge") == 1


def test_a_timeout_is_checked_before_the_charge_is_re_sent_with_the_same_key(
    stack: Stack,
) -> None:
    order_id = _to_payment_unknown(stack, "timeout")
    assert stack.charges(order_id) == []  # the held request applied nothing
    stack.settle()
    assert stack.state(order_id) is S.SHIPPED
    money = [c for c in _calls(stack, order_id) if c["service"] == "payments"]
    assert [(c["operation"], c["status"]) for c in money] == [
        ("charge", None),  # held, then closed: no answer
        ("status", 404),  # the provider has no charge under the key
        ("charge", 201),  # only now re-sent
    ]
    key = _charge_key(stack, order_id)
    assert money[0]["idempotency_key"] == money[2]["idempotency_key"] == key
    assert [c["idempotency_key"] for c in stack.charges(order_id)] == [key]


def test_an_unknown_payment_keeps_the_reservation_past_expiry_until_a_manual_reconcile(
    stack: Stack,
) -> None:
    stack.sim.script("payments", "status", ["transient"] * 5)
    order_id = _to_payment_unknown(stack, "pending")
    stack.settle(max_rounds=40)  # the reconciliation gives up after its retries
    stack.clock.advance(TTL_S + 1)
    stack.settle()
    aggregate = stack.load(order_id)
    assert aggregate.order.state is S.PAYMENT_UNKNOWN
    assert aggregate.order.reservation_expired
    assert aggregate.needs_attention
    assert [r["status"] for r in stack.ledger(order_id)["effects"]["reservations"]] == ["held"]
    assert _calls(stack, order_id, "release") == []
    stack.sim.settle(_charge_key(stack, order_id), "succeeded")
    reply = stack.call("POST", f"/api/v1/orders/{order_id}/reconcile", who="operator")
    assert reply.status == 202
    stack.settle()
    assert stack.state(order_id) is S.SHIPPED
    assert _calls(stack, order_id, "release") == []
    assert len(stack.charges(order_id)) == 1


def test_an_expired_reservation_with_no_charge_ever_sent_is_released_and_payment_fails(
    stack: Stack,
) -> None:
    order_id = stack.create()
    stack.step()  # reserve only: the charge waits
    assert stack.state(order_id) is S.RESERVED
    stack.clock.advance(TTL_S - 1)
    assert stack.state(order_id) is S.RESERVED  # 14:59 — nothing has expired yet
    stack.clock.advance(1)
    stack.settle()
    aggregate = stack.load(order_id)
    assert aggregate.order.state is S.PAYMENT_FAILED
    assert aggregate.order.state_reason == "reservation_expired"
    assert _calls(stack, order_id, "charge") == []
    assert [r["status"] for r in stack.ledger(order_id)["effects"]["reservations"]] == ["released"]
    assert len(_calls(stack, order_id, "release")) == 1


def test_a_pending_charge_settled_failed_is_released_and_ends_payment_failed(
    stack: Stack,
) -> None:
    order_id = _to_payment_unknown(stack, "pending")
    stack.step()  # reconciliation: still pending, so it retries
    assert _calls(stack, order_id, "release") == []
    stack.sim.settle(_charge_key(stack, order_id), "failed")
    stack.settle()
    assert stack.state(order_id) is S.PAYMENT_FAILED
    released = [c for c in _calls(stack, order_id) if c["operation"] == "release"]
    settled_at = [c["operation"] for c in _calls(stack, order_id)].index("status")
    assert released
    assert _calls(stack, order_id).index(released[0]) > settled_at
