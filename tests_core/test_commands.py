"""Cancel, retry, reconcile and refund are allowed exactly where the lifecycle allows them."""

from __future__ import annotations

import pytest

from orderflow_core import (
    Forbidden,
    InvalidTransition,
    NotRetryable,
    OrderflowError,
    OrderState,
    StepStatus,
)
from tests_core.reach import REACHERS, reach
from tests_core.world import CUSTOMER, OPERATOR

STATES = sorted(REACHERS)

CANCEL_OK = {
    "created": "cancelled",
    "reserving_stopped": "cancelling",
    "reserved": "cancelling",
    "cancelling": "unchanged",
    "cancelled": "unchanged",
}
CUSTOMER_RETRY_OK = {"reserving_stopped", "paying_stopped"}
OPERATOR_RETRY_OK = {"reserving_stopped", "paying_stopped", "shipping_failed"}
RECONCILE_OK = {"payment_unknown"}
REFUND_OK = {"shipped", "shipping_failed"}


def test_every_reacher_lands_in_its_state() -> None:
    for name in STATES:
        w, order_id = reach(name)
        try:
            expected = name.removesuffix("_running").removesuffix("_stopped")
            assert w.state(order_id).value == expected, name
        finally:
            w.close()


@pytest.mark.parametrize("name", STATES)
def test_cancel_is_allowed_only_before_money_and_never_during_a_call(name: str) -> None:
    w, order_id = reach(name)
    try:
        before = w.load(order_id)
        if name in CANCEL_OK:
            _, result = w.run(w.service.cancel(CUSTOMER, order_id))
            assert result == CANCEL_OK[name]
            assert w.state(order_id) in (OrderState.CANCELLED, OrderState.CANCELLING)
        else:
            with pytest.raises(InvalidTransition) as refused:
                w.run(w.service.cancel(CUSTOMER, order_id))
            assert refused.value.current_state == before.order.state.value
            assert w.load(order_id) == before
    finally:
        w.close()


@pytest.mark.parametrize("name", STATES)
@pytest.mark.parametrize("who", ["customer", "operator"])
def test_retry_re_arms_only_a_failed_step_or_operator_shipping(name: str, who: str) -> None:
    principal = CUSTOMER if who == "customer" else OPERATOR
    allowed = CUSTOMER_RETRY_OK if who == "customer" else OPERATOR_RETRY_OK
    w, order_id = reach(name)
    try:
        before = w.load(order_id)
        if name in allowed:
            view = w.run(w.service.retry(principal, order_id))
            step = view.aggregate.current_step
            assert step is not None
            assert step.status is StepStatus.PENDING
            assert step.max_attempts == step.attempt + 5
            old = before.step(step.step_id)
            assert old is not None
            assert step.idempotency_key == old.idempotency_key
        else:
            with pytest.raises(NotRetryable):
                w.run(w.service.retry(principal, order_id))
            assert w.load(order_id) == before
    finally:
        w.close()


@pytest.mark.parametrize("name", STATES)
def test_reconcile_is_only_for_an_unknown_payment(name: str) -> None:
    w, order_id = reach(name)
    try:
        before = w.load(order_id)
        if name in RECONCILE_OK:
            w.run(w.service.reconcile(OPERATOR, order_id))
            w.settle()
            assert w.state(order_id) is OrderState.SHIPPED
            assert len(w.charges(order_id)) == 1
        else:
            with pytest.raises(InvalidTransition):
                w.run(w.service.reconcile(OPERATOR, order_id))
            assert w.load(order_id) == before
    finally:
        w.close()


@pytest.mark.parametrize("name", STATES)
def test_a_refund_needs_a_confirmed_charge_and_a_shipped_or_failed_shipment(name: str) -> None:
    w, order_id = reach(name)
    try:
        before = w.load(order_id)
        if name in REFUND_OK:
            refund, replayed = w.run(
                w.service.request_refund(OPERATOR, order_id, "k", 100, "goodwill")
            )
            assert not replayed
            assert refund.amount_minor == 100
        else:
            with pytest.raises(OrderflowError):
                w.run(w.service.request_refund(OPERATOR, order_id, "k", 100, "goodwill"))
            assert w.load(order_id) == before
    finally:
        w.close()


@pytest.mark.parametrize(
    ("call", "principal"),
    [("cancel", OPERATOR), ("reconcile", CUSTOMER), ("audit", CUSTOMER)],
)
def test_a_role_that_may_not_act_is_forbidden(call: str, principal: object) -> None:
    w, order_id = reach("reserved")
    try:
        with pytest.raises(Forbidden):
            w.run(getattr(w.service, call)(principal, order_id))
    finally:
        w.close()


def test_a_reconcile_outside_payment_unknown_is_refused_naming_the_state() -> None:
    w, order_id = reach("paid")
    try:
        with pytest.raises(InvalidTransition) as refused:
            w.run(w.service.reconcile(OPERATOR, order_id))
        assert refused.value.current_state == "paid"
        assert refused.value.requested == "reconcile"
        assert str(refused.value) == "reconciliation is only possible in payment_unknown"
    finally:
        w.close()


def test_a_manual_reconcile_is_audited_with_the_role_whether_queued_or_already_queued() -> None:
    w, order_id = reach("payment_unknown")
    try:
        w.run(w.service.reconcile(OPERATOR, order_id))
        audit = w.run(w.store.audit_entries(order_id))
        entries = [a for a in audit if a.action == "manual.reconcile"]
        assert [(a.outcome, a.details) for a in entries] == [
            ("already_queued", {"role": "operator"})
        ]
    finally:
        w.close()


@pytest.mark.parametrize(
    ("name", "who", "message"),
    [
        ("shipped", OPERATOR, "nothing to retry in state 'shipped'"),
        ("shipping_failed", CUSTOMER, "only an operator may retry shipping"),
        ("paid", OPERATOR, "the current step is pending, not retryable"),
    ],
)
def test_a_refused_retry_says_why(name: str, who: object, message: str) -> None:
    w, order_id = reach(name)
    try:
        with pytest.raises(NotRetryable) as refused:
            w.run(w.service.retry(who, order_id))  # type: ignore[arg-type]
        assert str(refused.value) == message
    finally:
        w.close()


def test_an_operator_retrying_shipping_is_in_the_history_with_the_reason() -> None:
    w, order_id = reach("shipping_failed")
    try:
        w.run(w.service.retry(OPERATOR, order_id))
        last = w.run(w.store.history(order_id))[-1]
        assert (last.to_state, last.reason) == (OrderState.SHIPPING, "operator retries shipping")
    finally:
        w.close()
