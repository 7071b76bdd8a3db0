"""A refund is its own operation: what each answer of the payment provider makes of it, and
what may still be refunded afterwards."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import pytest

from orderflow_core import (
    Broken,
    Context,
    InvalidTransition,
    OrderState,
    RefundStatus,
    StepKind,
    ValidationFailed,
    saga,
)
from orderflow_core.model import Refund
from tests_core.world import OPERATOR, World

S = OrderState


def shipped(ship: list[str] | None = None) -> tuple[World, UUID]:
    w = World()
    if ship:
        w.sim.script("shipping", "ship", ship)
    order_id = w.create()
    w.settle()
    return w, order_id


def refund_with(w: World, order_id: UUID, outcomes: list[str], amount: int | None) -> Refund:
    w.sim.script("payments", "refund", outcomes)
    refund, _ = w.run(w.service.request_refund(OPERATOR, order_id, "r-1", amount, "goodwill"))
    w.settle()
    found = w.load(order_id).refund(refund.refund_id)
    assert found is not None
    return found


def audit_of(w: World, order_id: UUID, refund: Refund) -> list[tuple[str, str]]:
    entries = w.run(w.store.audit_entries(order_id))
    return [(a.action, a.outcome) for a in entries if a.step_id == refund.step_id]


def event_types(w: World, order_id: UUID) -> list[str]:
    w.publish()
    return [e.type for e in w.run(w.store.events(after=0, limit=1000)) if e.order_id == order_id]


def test_a_refused_refund_fails_with_the_providers_code_and_can_be_asked_again() -> None:
    w, order_id = shipped()
    try:
        refund = refund_with(w, order_id, ["permanent"], None)
        assert refund.status is RefundStatus.FAILED
        assert refund.last_error == "refund_rejected"
        assert ("compensation.refund", "failed") in audit_of(w, order_id, refund)
        assert "refund.failed" in event_types(w, order_id)
        assert w.effects()["refunds"] == []
        # A failed refund holds no money back: the whole amount may be refunded again.
        total = w.load(order_id).order.total_minor
        again, _ = w.run(w.service.request_refund(OPERATOR, order_id, "r-2", total, "retry"))
        assert again.amount_minor == total
    finally:
        w.close()


def test_a_refund_that_keeps_failing_transiently_fails_after_five_attempts() -> None:
    w, order_id = shipped()
    try:
        refund = refund_with(w, order_id, ["transient"] * 5, 100)
        assert refund.status is RefundStatus.FAILED
        assert refund.last_error
        step = w.load(order_id).step(refund.step_id)
        assert step is not None
        assert [a.outcome for a in step.attempts] == ["transient"] * 5
        assert ("compensation.refund", "failed") in audit_of(w, order_id, refund)
        assert w.state(order_id) is S.SHIPPED
    finally:
        w.close()


def test_a_refund_whose_answer_was_lost_is_asked_again_under_its_key_and_succeeds_once() -> None:
    w, order_id = shipped()
    try:
        refund = refund_with(w, order_id, ["lost_response"], 100)
        assert refund.status is RefundStatus.SUCCEEDED
        assert refund.refund_reference
        refunds = w.effects()["refunds"]
        assert [r["amount_minor"] for r in refunds] == [100]
        assert ("compensation.refund", "succeeded") in audit_of(w, order_id, refund)
    finally:
        w.close()


def test_a_refund_answered_with_a_broken_reply_is_blocked_for_a_person() -> None:
    w, order_id = shipped()
    try:
        # The refund is claimed and started by hand, and answered with a malformed reply.
        refund, _ = w.run(w.service.request_refund(OPERATOR, order_id, "r-1", 100, "goodwill"))
        claims = w.run(w.store.claim_due(owner="worker-x", now=w.clock.now(), limit=5, lease_s=30))
        (leased,) = [c for c in claims if c.step_id == refund.step_id]
        now = w.clock.now()
        context = Context(now, "worker-x", w.timing)
        w.run(w.store.update(order_id, lambda agg: saga.decide_start(agg, leased, context)))
        broken = Broken("refund: HTTP 200 with a malformed body")
        answered = Context(now + timedelta(seconds=2), "worker-x", w.timing)
        w.run(
            w.store.update(
                order_id, lambda agg: saga.decide_result(agg, leased, broken, answered)
            )
        )
        found = w.load(order_id).refund(refund.refund_id)
        assert found is not None
        assert found.status is RefundStatus.BLOCKED
        assert found.updated_at == answered.now  # when the answer was recorded
        assert found.last_error == "refund: HTTP 200 with a malformed body"
        assert ("compensation.refund", "blocked") in audit_of(w, order_id, found)
        assert "refund.blocked" in event_types(w, order_id)
        # A blocked refund holds no money back either.
        total = w.load(order_id).order.total_minor
        again, _ = w.run(w.service.request_refund(OPERATOR, order_id, "r-2", total, "retry"))
        assert again.amount_minor == total
    finally:
        w.close()



@pytest.mark.parametrize(("amounts", "ends"), [([None], S.REFUNDED), ([100], S.SHIPPING_FAILED)])
def test_after_a_failed_shipment_only_a_full_refund_ends_the_order_refunded(
    amounts: list[int | None], ends: OrderState
) -> None:
    w, order_id = shipped(["permanent"])
    try:
        assert w.state(order_id) is S.SHIPPING_FAILED
        refund = refund_with(w, order_id, ["success"], amounts[0])
        assert refund.status is RefundStatus.SUCCEEDED
        assert w.state(order_id) is ends
    finally:
        w.close()


def test_a_full_refund_after_shipping_leaves_the_order_shipped() -> None:
    w, order_id = shipped()
    try:
        refund = refund_with(w, order_id, ["success"], None)
        assert refund.status is RefundStatus.SUCCEEDED
        assert refund.amount_minor == w.load(order_id).order.total_minor
        assert w.state(order_id) is S.SHIPPED
        assert [step.kind for step in w.load(order_id).steps].count(StepKind.REFUND) == 1
    finally:
        w.close()


def test_refunds_never_add_up_to_more_than_the_order() -> None:
    w, order_id = shipped()
    try:
        total = w.load(order_id).order.total_minor
        w.run(w.service.request_refund(OPERATOR, order_id, "r-1", 100, "part"))
        with pytest.raises(ValidationFailed):
            w.run(w.service.request_refund(OPERATOR, order_id, "r-2", total - 99, "rest"))
        rest, _ = w.run(w.service.request_refund(OPERATOR, order_id, "r-3", None, "rest"))
        assert rest.amount_minor == total - 100
    finally:
        w.close()


def test_a_refund_before_shipping_is_refused_naming_the_state() -> None:
    w = World()
    try:
        order_id = w.create()
        w.step()
        with pytest.raises(InvalidTransition) as refused:
            w.run(w.service.request_refund(OPERATOR, order_id, "r-1", 100, "early"))
        assert (refused.value.current_state, refused.value.requested) == ("reserved", "refund")
        assert str(refused.value) == (
            "a refund needs a confirmed charge and shipped or shipping_failed"
        )
    finally:
        w.close()


def test_a_refund_in_flight_is_processing_and_its_record_keeps_each_answer() -> None:
    w, order_id = shipped()
    try:
        w.sim.script("payments", "refund", ["lost_response", "permanent"])
        refund, _ = w.run(w.service.request_refund(OPERATOR, order_id, "r-1", 100, "goodwill"))
        w.clock.advance(1)
        claims = w.run(w.store.claim_due(owner="worker-x", now=w.clock.now(), limit=5, lease_s=30))
        (leased,) = [c for c in claims if c.step_id == refund.step_id]
        context = Context(w.clock.now(), "worker-x", w.timing)
        w.run(w.store.update(order_id, lambda agg: saga.decide_start(agg, leased, context)))
        started = w.load(order_id).refund(refund.refund_id)
        assert started is not None
        assert (started.status, started.updated_at) == (RefundStatus.PROCESSING, w.clock.now())
        assert started.updated_at > refund.created_at
        w.clock.advance(31)
        w.step()  # the answer is lost: asked again later, under the same key
        step = w.load(order_id).step(refund.step_id)
        assert step is not None
        assert step.last_error == "refund: connection dropped after sending"
        w.settle()  # the provider now refuses it
        step = w.load(order_id).step(refund.step_id)
        failed = w.load(order_id).refund(refund.refund_id)
        assert step is not None
        assert failed is not None
        assert (step.status.value, step.last_error) == ("failed", "refund_rejected")
        assert failed.status is RefundStatus.FAILED
        assert failed.updated_at > started.updated_at
    finally:
        w.close()


def test_a_successful_refund_keeps_the_providers_answer_on_its_step() -> None:
    w, order_id = shipped()
    try:
        refund = refund_with(w, order_id, ["success"], 100)
        step = w.load(order_id).step(refund.step_id)
        assert step is not None
        assert step.result["refund_reference"] == refund.refund_reference
        assert refund.refund_reference
    finally:
        w.close()


@pytest.mark.parametrize("amount", [0, -5, "over"])
def test_a_refund_amount_outside_one_to_what_is_left_is_refused_naming_the_field(
    amount: int | str,
) -> None:
    w, order_id = shipped()
    try:
        total = w.load(order_id).order.total_minor
        asked = total + 1 if amount == "over" else amount
        before = w.load(order_id)
        with pytest.raises(ValidationFailed) as refused:
            w.run(w.service.request_refund(OPERATOR, order_id, "r-1", asked, "x"))  # type: ignore[arg-type]
        assert refused.value.errors == [
            {"field": "amount_minor", "message": f"a positive integer not above {total}"}
        ]
        assert w.load(order_id) == before
    finally:
        w.close()


@pytest.mark.parametrize("amount", ["one", "all"])
def test_a_refund_of_one_minor_unit_or_of_everything_left_is_accepted(amount: str) -> None:
    w, order_id = shipped()
    try:
        total = w.load(order_id).order.total_minor
        asked = 1 if amount == "one" else total
        refund, _ = w.run(w.service.request_refund(OPERATOR, order_id, "r-1", asked, "x"))
        assert refund.amount_minor == asked
    finally:
        w.close()


def test_a_requested_refund_reads_back_as_asked() -> None:
    w, order_id = shipped()
    try:
        now = w.clock.now()
        refund, _ = w.run(w.service.request_refund(OPERATOR, order_id, "r-1", 250, "goodwill"))
        stored = w.load(order_id).refund(refund.refund_id)
        assert stored == refund
        assert (refund.order_id, refund.amount_minor, refund.reason) == (order_id, 250, "goodwill")
        assert (refund.status, refund.requested_by) == (RefundStatus.REQUESTED, "order_operator")
        assert (refund.created_at, refund.updated_at) == (now, now)
        step = w.load(order_id).step(refund.step_id)
        assert step is not None
        assert (step.kind, step.refund_id) == (StepKind.REFUND, refund.refund_id)
    finally:
        w.close()


def test_the_same_refund_request_twice_is_one_refund() -> None:
    w, order_id = shipped()
    try:
        first, replayed_first = w.run(
            w.service.request_refund(OPERATOR, order_id, "r-1", 100, "goodwill")
        )
        again, replayed_again = w.run(
            w.service.request_refund(OPERATOR, order_id, "r-1", 100, "goodwill")
        )
        assert (replayed_first, replayed_again) == (False, True)
        assert again == first
        assert len(w.load(order_id).refunds) == 1
    finally:
        w.close()
