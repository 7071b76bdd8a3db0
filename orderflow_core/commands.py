"""Decisions for what people ask: create, cancel, retry, reconcile, refund. Pure functions."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from orderflow_core.context import Context
from orderflow_core.draft import Draft, new_order_draft
from orderflow_core.errors import InvalidTransition, NotRetryable, ValidationFailed
from orderflow_core.model import (
    ApiIdempotency,
    Change,
    HistoryEntry,
    Item,
    Order,
    OrderAggregate,
    Principal,
    Refund,
)
from orderflow_core.payment import OUTCOME_UNKNOWN
from orderflow_core.process import NEWEST, process_for
from orderflow_core.states import (
    DUE_STATUSES,
    OrderState,
    RefundStatus,
    Role,
    StepKind,
    StepStatus,
)
from orderflow_core.vocabulary import Audit, refund_event, state_event


def create_order(
    principal: Principal,
    items: Sequence[Item],
    currency: str,
    idem: ApiIdempotency,
    ctx: Context,
    trace_parent: str | None = None,
    process_version: int = NEWEST,
) -> Change:
    """A new order in `created` with its reserve step, history, event and audit;
    `trace_parent` is the creating request's trace context, kept for its steps' spans."""
    order = Order(
        order_id=idem.resource_id,
        customer_id=principal.user_id,
        items=tuple(items),
        total_minor=sum(i.total_minor for i in items),
        currency=currency,
        process_version=process_for(process_version).version,
        state=OrderState.CREATED,
        created_at=ctx.now,
        updated_at=ctx.now,
        state_reason="order placed",
        trace_parent=trace_parent,
    )
    d = new_order_draft(order, ctx)
    entry = HistoryEntry(
        order.order_id, 1, None, OrderState.CREATED, ctx.now, ctx.actor, "order placed"
    )
    d.history.append(entry)
    d.emit(
        state_event(OrderState.CREATED),
        {**entry.event_payload(), "total_minor": order.total_minor},
    )
    d.note(Audit.ORDER_CREATED, "created", idempotency_key=idem.key)
    d.new_step(StepKind.RESERVE)
    return d.change(idempotency=idem)


def cancel(aggregate: OrderAggregate, ctx: Context) -> tuple[Change, str]:
    """Cancel per the table; returns the change and `cancelled`, `cancelling` or `unchanged`."""
    d = Draft(aggregate, ctx)
    state = aggregate.order.state
    if state in (OrderState.CANCELLING, OrderState.CANCELLED):
        return Change(), "unchanged"
    reserve = d.latest(StepKind.RESERVE)
    charge = d.latest(StepKind.CHARGE)
    if state is OrderState.CREATED and reserve is not None and reserve.status in DUE_STATUSES:
        d.cancel_waiting(StepKind.RESERVE, "cancelled by customer")
        d.move(OrderState.CANCELLED, "cancelled before the reserve step started")
        d.note(Audit.ORDER_CANCEL, "cancelled")
        return d.change(), "cancelled"
    stopped_reserve = state is OrderState.RESERVING and reserve is not None and reserve.is_stopped
    unstarted_charge = (
        state is OrderState.RESERVED and charge is not None and charge.status in DUE_STATUSES
    )
    if not (stopped_reserve or unstarted_charge):
        raise InvalidTransition(
            state.value,
            OrderState.CANCELLED.value,
            f"an order in {state.value!r} cannot be cancelled now",
        )
    d.cancel_waiting(StepKind.CHARGE, "cancelled by customer")
    d.cancel_waiting(StepKind.EXPIRE_RESERVATION, "cancelled by customer")
    d.move(OrderState.CANCELLING, "cancelled by customer")
    d.new_step(StepKind.RELEASE_RESERVATION)
    d.note(Audit.ORDER_CANCEL, "cancelling")
    d.note(Audit.RELEASE_RESERVATION, "requested", reason="cancelled by customer")
    return d.change(), "cancelling"


def retry(aggregate: OrderAggregate, principal: Principal, ctx: Context) -> Change:
    """Re-arm the current step with a fresh budget and the same key, where the rules allow."""
    d = Draft(aggregate, ctx)
    order = aggregate.order
    step = aggregate.current_step
    operator = principal.role is Role.OPERATOR
    notify = aggregate.latest(StepKind.NOTIFY_CUSTOMER)
    if order.is_terminal and notify is not None and notify.is_stopped:
        if not operator:
            raise NotRetryable("only an operator may retry the notification")
        step = notify
    elif step is None or order.is_terminal:
        raise NotRetryable(f"nothing to retry in state {order.state.value!r}")
    if order.state is OrderState.SHIPPING_FAILED:
        if not operator or step.kind is not StepKind.SHIP:
            raise NotRetryable("only an operator may retry shipping")
        d.move(OrderState.SHIPPING, "operator retries shipping")
    elif not (step.status is StepStatus.FAILED or (operator and step.status is StepStatus.BLOCKED)):
        raise NotRetryable(f"the current step is {step.status.value}, not retryable")
    elif step.kind is StepKind.CHARGE and (
        order.state is OrderState.PAYMENT_UNKNOWN
        or (step.last_error or "").startswith(OUTCOME_UNKNOWN)
    ):
        raise NotRetryable("the payment outcome is unknown: reconcile instead")
    budget = ctx.timing.retry.attempts_per_budget
    d.update_step(
        step.step_id,
        status=StepStatus.PENDING,
        next_attempt_at=ctx.now,
        armed_attempt=step.attempt,
        max_attempts=step.attempt + budget,
        last_error=None,
        lease_owner=None,
        lease_expires_at=None,
    )
    d.note(
        Audit.MANUAL_RETRY,
        "re-armed",
        step.step_id,
        kind=step.kind.value,
        role=principal.role.value,
    )
    return d.change()


def reconcile(aggregate: OrderAggregate, principal: Principal, ctx: Context) -> Change:
    """Queue a status check under the charge's key; only in payment_unknown."""
    order = aggregate.order
    if order.state is not OrderState.PAYMENT_UNKNOWN:
        raise InvalidTransition(
            order.state.value, "reconcile", "reconciliation is only possible in payment_unknown"
        )
    d = Draft(aggregate, ctx)
    if d.active(StepKind.RECONCILE_PAYMENT):
        d.note(Audit.MANUAL_RECONCILE, "already_queued", role=principal.role.value)
        return d.change()
    step = d.new_step(StepKind.RECONCILE_PAYMENT)
    d.note(Audit.MANUAL_RECONCILE, "queued", step.step_id, role=principal.role.value)
    return d.change()


def unrefunded_minor(aggregate: OrderAggregate) -> int:
    """What may still be refunded: the total less every refund not failed or blocked."""
    taken = sum(
        r.amount_minor
        for r in aggregate.refunds
        if r.status not in (RefundStatus.FAILED, RefundStatus.BLOCKED)
    )
    return aggregate.order.total_minor - taken


def request_refund(
    aggregate: OrderAggregate,
    principal: Principal,
    amount_minor: int | None,
    reason: str,
    idem: ApiIdempotency,
    ctx: Context,
) -> tuple[Change, UUID]:
    """A refund of a confirmed charge, after shipped or shipping_failed; its own step and key."""
    order = aggregate.order
    allowed = (OrderState.SHIPPED, OrderState.SHIPPING_FAILED)
    if order.payment_status != "succeeded" or order.state not in allowed:
        raise InvalidTransition(
            order.state.value,
            "refund",
            "a refund needs a confirmed charge and shipped or shipping_failed",
        )
    left = unrefunded_minor(aggregate)
    amount = left if amount_minor is None else amount_minor
    if amount < 1 or amount > left:
        raise ValidationFailed(
            [{"field": "amount_minor", "message": f"a positive integer not above {left}"}]
        )
    d = Draft(aggregate, ctx)
    refund_id = idem.resource_id
    step = d.new_step(StepKind.REFUND, refund_id=refund_id)
    d.put_refund(
        Refund(
            refund_id,
            order.order_id,
            amount,
            reason,
            RefundStatus.REQUESTED,
            principal.user_id,
            ctx.now,
            ctx.now,
            step.step_id,
        )
    )
    d.emit(
        refund_event(RefundStatus.REQUESTED),
        {"refund_id": str(refund_id), "amount_minor": amount, "reason": reason},
    )
    d.note(
        Audit.MANUAL_REFUND,
        "requested",
        step.step_id,
        refund_id=str(refund_id),
        amount_minor=amount,
        reason=reason,
    )
    return d.change(idempotency=idem), refund_id
