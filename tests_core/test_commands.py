"""Cancel, retry, reconcile and refund are allowed exactly where the lifecycle allows them."""

from __future__ import annotations

from uuid import UUID

import pytest

from orderflow_core import (
    Forbidden,
    InvalidTransition,
    NotRetryable,
    OrderflowError,
    OrderState,
    StepStatus,
)
from orderflow_core.steps.registry import current_step
from tests_core.reach import REACHERS, reach
from tests_core.world import CUSTOMER, OPERATOR, World

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
            step = current_step(view.aggregate)
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


def test_a_cancel_before_the_reserve_step_started_is_recorded_with_its_reason() -> None:
    w, order_id = reach("created")
    try:
        w.run(w.service.cancel(CUSTOMER, order_id))
        aggregate = w.load(order_id)
        reserve = aggregate.steps[0]
        assert (reserve.status, reserve.last_error) == (
            StepStatus.CANCELLED,
            "cancelled by customer",
        )
        assert aggregate.order.state_reason == "cancelled before the reserve step started"
        audit = [(a.action, a.outcome) for a in w.run(w.store.audit_entries(order_id))]
        assert ("order.cancel", "cancelled") in audit
    finally:
        w.close()


def _refused_cancel_message(w: World, order_id: UUID) -> str:
    before = w.load(order_id)
    with pytest.raises(InvalidTransition) as refused:
        w.run(w.service.cancel(CUSTOMER, order_id))
    assert w.load(order_id) == before
    return str(refused.value)


def test_a_cancel_between_the_reserve_steps_claim_and_its_start_is_refused() -> None:
    """The executor owns the reserve step from its claim on, before the order says reserving."""
    w = World()
    try:
        order_id = w.create()
        w.run(w.store.claim_due(owner="worker-x", now=w.clock.now(), limit=1, lease_s=30))
        assert w.state(order_id) is OrderState.CREATED
        assert _refused_cancel_message(w, order_id) == (
            "an order in 'created' cannot be cancelled now"
        )
    finally:
        w.close()


@pytest.mark.parametrize(
    ("operation", "steps", "state"),
    [(("warehouse", "reserve"), 1, "reserving"), (("payments", "charge"), 2, "paying")],
)
def test_a_cancel_while_a_step_waits_to_retry_is_refused(
    operation: tuple[str, str], steps: int, state: str
) -> None:
    """A reserve or a charge that failed transiently and waits for its retry has been sent:
    the order is no longer cancellable."""
    w = World()
    try:
        w.sim.script(*operation, ["transient"])
        order_id = w.create()
        for _ in range(steps):
            w.step()
        assert w.state(order_id).value == state
        assert StepStatus.RETRY_SCHEDULED in [s.status for s in w.load(order_id).steps]
        assert _refused_cancel_message(w, order_id) == (
            f"an order in '{state}' cannot be cancelled now"
        )
    finally:
        w.close()


def test_a_cancel_after_the_reservation_ends_cancelled_once_the_stock_is_back() -> None:
    w, order_id = reach("cancelling")
    try:
        w.settle()
        aggregate = w.load(order_id)
        assert aggregate.order.state is OrderState.CANCELLED
        assert aggregate.order.state_reason == "reservation released after cancel"
        assert aggregate.order.reservation_status == "released"
    finally:
        w.close()


def test_a_cancel_of_a_reserved_order_records_every_part_of_it() -> None:
    w, order_id = reach("reserved")
    try:
        w.run(w.service.cancel(CUSTOMER, order_id))
        aggregate = w.load(order_id)
        assert aggregate.order.state is OrderState.CANCELLING
        assert aggregate.order.state_reason == "cancelled by customer"
        waiting = {
            s.kind.value: (s.status, s.last_error)
            for s in aggregate.steps
            if s.kind.value in ("charge", "expire_reservation")
        }
        assert waiting == {
            "charge": (StepStatus.CANCELLED, "cancelled by customer"),
            "expire_reservation": (StepStatus.CANCELLED, "cancelled by customer"),
        }
        audit = [
            (a.action, a.outcome, a.details)
            for a in w.run(w.store.audit_entries(order_id))
            if a.action in ("order.cancel", "compensation.release_reservation")
        ]
        assert audit == [
            ("order.cancel", "cancelling", {}),
            ("compensation.release_reservation", "requested", {"reason": "cancelled by customer"}),
        ]
    finally:
        w.close()


def test_a_refused_cancel_names_the_state_and_the_cancelled_target() -> None:
    w, order_id = reach("paid")
    try:
        with pytest.raises(InvalidTransition) as refused:
            w.run(w.service.cancel(CUSTOMER, order_id))
        assert (refused.value.current_state, refused.value.requested) == ("paid", "cancelled")
        assert str(refused.value) == "an order in 'paid' cannot be cancelled now"
    finally:
        w.close()


@pytest.mark.parametrize("who", ["customer", "operator"])
def test_a_retry_re_arms_the_step_with_a_fresh_budget_and_is_audited(who: str) -> None:
    principal = CUSTOMER if who == "customer" else OPERATOR
    w, order_id = reach("paying_stopped")
    try:
        before = current_step(w.load(order_id))
        assert before is not None
        assert before.last_error
        w.run(w.service.retry(principal, order_id))
        step = w.load(order_id).step(before.step_id)
        assert step is not None
        assert (step.status, step.last_error, step.next_attempt_at) == (
            StepStatus.PENDING,
            None,
            w.clock.now(),
        )
        assert (step.armed_attempt, step.max_attempts) == (before.attempt, before.attempt + 5)
        audit = [
            (a.action, a.outcome, a.step_id, a.details)
            for a in w.run(w.store.audit_entries(order_id))
            if a.action == "manual.retry"
        ]
        assert audit == [
            ("manual.retry", "re-armed", step.step_id, {"kind": "charge", "role": who})
        ]
    finally:
        w.close()


@pytest.mark.parametrize("name", STATES)
def test_the_order_lists_exactly_the_actions_its_reader_may_ask_for_now(name: str) -> None:
    """`allowed_actions` (what the API's order carries and the console shows) is what the
    tables above allow: cancel and retry for the customer, retry, reconcile and refund for
    the operator — never an action that would be refused, nor one that would change nothing."""
    customer = []
    if CANCEL_OK.get(name, "unchanged") != "unchanged":
        customer.append("cancel")
    if name in CUSTOMER_RETRY_OK:
        customer.append("retry")
    operator = [
        action
        for action, allowed in (
            ("retry", OPERATOR_RETRY_OK),
            ("reconcile", RECONCILE_OK),
            ("refund", REFUND_OK),
        )
        if name in allowed
    ]
    w, order_id = reach(name)
    try:
        before = w.load(order_id)
        assert w.run(w.service.get_order(CUSTOMER, order_id)).allowed_actions == tuple(customer)
        assert w.run(w.service.get_order(OPERATOR, order_id)).allowed_actions == tuple(operator)
        assert w.load(order_id) == before  # trying the decisions wrote nothing
    finally:
        w.close()
