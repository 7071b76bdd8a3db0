"""Retries on the FakeClock, blocked steps, re-arming by a person, and shipping failures."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import pytest

from acceptance.stack import Stack
from orderflow_core import OrderState, StepKind, StepStatus

pytestmark = pytest.mark.postgres
S = OrderState


def _keys(stack: Stack, order_id: UUID, operation: str) -> list[str]:
    calls = stack.ledger(order_id)["calls"]
    return [c["idempotency_key"] for c in calls if c["operation"] == operation]


def test_transient_errors_retry_after_1_2_4_8_seconds_then_the_step_fails(stack: Stack) -> None:
    order_id = stack.create()
    stack.sim.script("warehouse", "reserve", ["transient"] * 5, order_id=str(order_id))
    for delay in (1, 2, 4, 8):
        assert stack.step() == 1
        step = stack.load(order_id).latest(StepKind.RESERVE)
        assert step is not None
        assert step.status is StepStatus.RETRY_SCHEDULED
        assert step.next_attempt_at == stack.clock.now() + timedelta(seconds=delay)
        stack.clock.advance(delay - 0.001)
        assert stack.step() == 0  # not a moment early
        stack.clock.advance(0.001)
    assert stack.step() == 1
    aggregate = stack.load(order_id)
    step = aggregate.latest(StepKind.RESERVE)
    assert step is not None
    assert step.status is StepStatus.FAILED
    assert [a.attempt for a in step.attempts] == [1, 2, 3, 4, 5]
    gaps = [
        (b.started_at - a.started_at).total_seconds()
        for a, b in zip(step.attempts, step.attempts[1:], strict=False)
    ]
    assert gaps == [1, 2, 4, 8]
    assert aggregate.order.state is S.RESERVING
    assert aggregate.needs_attention
    assert len(_keys(stack, order_id, "reserve")) == 5


def test_a_customer_retry_re_arms_the_failed_step_with_the_same_key(stack: Stack) -> None:
    order_id = stack.create()
    stack.sim.script("payments", "charge", ["transient"] * 5, order_id=str(order_id))
    stack.settle(max_rounds=40)
    charge = stack.load(order_id).latest(StepKind.CHARGE)
    assert charge is not None
    assert charge.status is StepStatus.FAILED
    reply = stack.call("POST", f"/api/v1/orders/{order_id}/retry", who="customer")
    assert reply.status == 202
    assert reply.body["current_step"]["max_attempts"] == 10
    stack.settle()
    assert stack.state(order_id) is S.SHIPPED
    assert set(_keys(stack, order_id, "charge")) == {charge.idempotency_key}
    assert len(stack.charges(order_id)) == 1


def test_a_permanent_technical_error_blocks_at_once_and_only_an_operator_re_arms_it(
    stack: Stack,
) -> None:
    order_id = stack.create()
    stack.sim.script("warehouse", "release", ["permanent"], order_id=str(order_id))
    stack.step()  # reserved
    assert stack.call("POST", f"/api/v1/orders/{order_id}/cancel").status == 202
    stack.step()  # the release answers 422 request_rejected: a person must look
    aggregate = stack.load(order_id)
    release = aggregate.latest(StepKind.RELEASE_RESERVATION)
    assert release is not None
    assert release.status is StepStatus.BLOCKED
    assert [a.attempt for a in release.attempts] == [1]
    assert aggregate.needs_attention
    refused = stack.call("POST", f"/api/v1/orders/{order_id}/retry", who="customer")
    assert (refused.status, refused.code) == (409, "not_retryable")
    assert stack.call("POST", f"/api/v1/orders/{order_id}/retry", who="operator").status == 202
    stack.settle()
    assert stack.state(order_id) is S.CANCELLED
    assert set(_keys(stack, order_id, "release")) == {release.idempotency_key}


def _shipping_failed(stack: Stack) -> UUID:
    order_id = stack.create()
    stack.sim.script("shipping", "ship", ["permanent"], order_id=str(order_id))
    stack.settle()
    assert stack.state(order_id) is S.SHIPPING_FAILED
    return order_id


def test_cancel_after_paid_answers_409_and_changes_nothing(stack: Stack) -> None:
    order_id = _shipping_failed(stack)
    before = stack.load(order_id)
    reply = stack.call("POST", f"/api/v1/orders/{order_id}/cancel")
    assert (reply.status, reply.code) == (409, "invalid_transition")
    assert reply.body["current_state"] == "shipping_failed"
    assert stack.load(order_id) == before


def test_a_shipping_failure_is_retried_by_an_operator_with_the_same_key(stack: Stack) -> None:
    order_id = _shipping_failed(stack)
    assert stack.call("POST", f"/api/v1/orders/{order_id}/retry", who="operator").status == 202
    stack.settle()
    assert stack.state(order_id) is S.SHIPPED
    assert len(set(_keys(stack, order_id, "ship"))) == 1
    assert len(stack.ledger(order_id)["effects"]["shipments"]) == 1


def test_a_shipping_failure_is_refunded_as_its_own_operation_and_the_order_ends_refunded(
    stack: Stack,
) -> None:
    order_id = _shipping_failed(stack)
    body = {"reason": "parcel lost"}
    reply = stack.call(
        "POST", f"/api/v1/orders/{order_id}/refunds", who="operator", key="refund-1", body=body
    )
    assert reply.status == 202
    stack.settle()
    aggregate = stack.load(order_id)
    assert aggregate.order.state is S.REFUNDED
    refunds = stack.ledger(order_id)["effects"]["refunds"]
    assert [r["amount_minor"] for r in refunds] == [aggregate.order.total_minor]
    actions = [(a.action, a.outcome) for a in stack.audit(order_id)]
    assert ("compensation.refund", "succeeded") in actions
    assert S.CANCELLED.value not in [b for _, b in stack.states_visited(order_id)]
