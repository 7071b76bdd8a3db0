"""Decisions for what people ask: create, cancel, retry, reconcile, refund. Pure functions.

What a step kind allows (who may retry it and when, when the order may be cancelled at it) is
the kind's own fact, read from its definition (orderflow_core/steps/definition.py).
"""

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
    Step,
)
from orderflow_core.process import NEWEST, process_for
from orderflow_core.states import (
    OrderState,
    RefundStatus,
    Role,
    StepKind,
    StepStatus,
)
from orderflow_core.steps.registry import STEPS, current_step, waiting_step
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
    process = process_for(process_version)
    order = Order(
        order_id=idem.resource_id,
        customer_id=principal.user_id,
        items=tuple(items),
        total_minor=sum(i.total_minor for i in items),
        currency=currency,
        process_version=process.version,
        state=OrderState.CREATED,
        created_at=ctx.now,
        updated_at=ctx.now,
        state_reason="order placed",
        trace_parent=trace_parent,
    )
    d = new_order_draft(order, ctx, STEPS)
    entry = HistoryEntry(
        order.order_id, 1, None, OrderState.CREATED, ctx.now, ctx.actor, "order placed"
    )
    d.history.append(entry)
    d.emit(
        state_event(OrderState.CREATED),
        {**entry.event_payload(), "total_minor": order.total_minor},
    )
    d.note(Audit.ORDER_CREATED, "created", idempotency_key=idem.key)
    d.new_step(process.first)
    return d.change(idempotency=idem)


def cancel_at(aggregate: OrderAggregate) -> Step:
    """The current step the order may be cancelled at now (its kind's `cancel` fact), or
    `InvalidTransition`."""
    state = aggregate.order.state
    step = current_step(aggregate)
    rule = STEPS[step.kind].cancel if step is not None else None
    if step is None or rule is None or not rule.allows(state, step):
        raise InvalidTransition(
            state.value,
            OrderState.CANCELLED.value,
            f"an order in {state.value!r} cannot be cancelled now",
        )
    return step


def cancel(aggregate: OrderAggregate, ctx: Context) -> tuple[Change, str]:
    """Cancel per the table; returns the change and `cancelled`, `cancelling` or `unchanged`."""
    state = aggregate.order.state
    if state in (OrderState.CANCELLING, OrderState.CANCELLED):
        return Change(), "unchanged"
    step = cancel_at(aggregate)
    d = Draft(aggregate, ctx, STEPS)
    d.cancel_waiting(step.kind, "cancelled by customer")
    if state is OrderState.CREATED:
        # No step has started yet: nothing is held anywhere, nothing to give back.
        d.move(OrderState.CANCELLED, f"cancelled before the {step.kind} step started")
        d.note(Audit.ORDER_CANCEL, "cancelled")
        return d.change(), "cancelled"
    d.cancel_waiting(StepKind.EXPIRE_RESERVATION, "cancelled by customer")
    d.move(OrderState.CANCELLING, "cancelled by customer")
    d.new_step(StepKind.RELEASE_RESERVATION)
    d.note(Audit.ORDER_CANCEL, "cancelling")
    d.note(Audit.RELEASE_RESERVATION, "requested", reason="cancelled by customer")
    return d.change(), "cancelling"


def retry_of(aggregate: OrderAggregate, principal: Principal) -> Step:
    """The step `principal` may re-arm now — the one the order waits on (its current step, or a
    stopped step of a kind that outlives the order), where its kind's `retry` fact allows —
    or `NotRetryable`."""
    order = aggregate.order
    step = waiting_step(aggregate)
    operator = principal.role is Role.OPERATOR
    if step is None:
        raise NotRetryable(f"nothing to retry in state {order.state.value!r}")
    rule = STEPS[step.kind].retry
    if step.is_stopped and principal.role not in rule.failed and not operator:
        raise NotRetryable(rule.others_refused or f"a {step.kind} step is not yours to retry")
    if not (step.status is StepStatus.FAILED or (operator and step.status is StepStatus.BLOCKED)):
        raise NotRetryable(f"the current step is {step.status.value}, not retryable")
    refused = rule.refused(aggregate, step)
    if refused is not None:
        raise NotRetryable(refused)
    return step


def retry(aggregate: OrderAggregate, principal: Principal, ctx: Context) -> Change:
    """Re-arm the step `retry_of` names with a fresh budget and the same key."""
    step = retry_of(aggregate, principal)
    d = Draft(aggregate, ctx, STEPS)
    STEPS[step.kind].retry.rearm(d, step)
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
    check_reconcile(aggregate)
    d = Draft(aggregate, ctx, STEPS)
    if d.active(StepKind.RECONCILE_PAYMENT):
        d.note(Audit.MANUAL_RECONCILE, "already_queued", role=principal.role.value)
        return d.change()
    step = d.new_step(StepKind.RECONCILE_PAYMENT)
    d.note(Audit.MANUAL_RECONCILE, "queued", step.step_id, role=principal.role.value)
    return d.change()


def check_reconcile(aggregate: OrderAggregate) -> None:
    """`InvalidTransition` unless the payment is in doubt (the only time to reconcile)."""
    order = aggregate.order
    if order.state is not OrderState.PAYMENT_UNKNOWN:
        raise InvalidTransition(
            order.state.value, "reconcile", "reconciliation is only possible in payment_unknown"
        )


def check_refund(aggregate: OrderAggregate, amount_minor: int | None) -> int:
    """The amount a refund of `amount_minor` (None: all that is left) gives back, or
    `InvalidTransition` (no confirmed charge, or not shipped or shipping_failed) or
    `ValidationFailed` (not a positive amount within what is not yet refunded)."""
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
    return amount


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
    amount = check_refund(aggregate, amount_minor)
    d = Draft(aggregate, ctx, STEPS)
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
