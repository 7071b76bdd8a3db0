"""The saga: for each step kind, what starting it does and how each outcome moves the order.

Two pure entry points, both run by the store while the order is locked:
`decide_start` (the intent, committed before any external call) and `decide_result`
(outcome + transition + next steps + events + audit, committed under the step's generation).
"""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

import attrs

from orderflow_core import payment
from orderflow_core.attempts import (
    call_for,
    detail,
    finish_attempt,
    open_attempt,
    retry_or_stop,
    seconds,
    stop,
    succeed,
)
from orderflow_core.calls import CallPlan
from orderflow_core.context import Context
from orderflow_core.draft import Draft
from orderflow_core.model import MAINLINE_KINDS, Change, Claim, OrderAggregate, Step
from orderflow_core.outcomes import (
    Broken,
    Outcome,
    Refused,
    Succeeded,
    Transient,
    UnknownOutcome,
    outcome_name,
)
from orderflow_core.states import OrderState, RefundStatus, StepKind, StepStatus


def guard_holds(aggregate: OrderAggregate, claim: Claim, ctx: Context) -> bool:
    """The claim's generation still owns the step (the stores' check) and its lease has not
    run out."""
    step = aggregate.step(claim.step_id)
    return (
        aggregate.holds(claim.guard)
        and step is not None
        and step.lease_expires_at is not None
        and step.lease_expires_at > ctx.now
    )


def decide_start(
    aggregate: OrderAggregate, claim: Claim, ctx: Context
) -> tuple[Change, CallPlan | None]:
    """Record the attempt's intent and the start transition; say which call to make, if any."""
    d = Draft(aggregate, ctx)
    if not guard_holds(aggregate, claim, ctx):
        return d.change(claim=claim), None
    open_attempt(d, d.step(claim.step_id), claim)
    # The attempt row is the record of the intent; the audit log keeps compensations, manual
    # decisions, stops and rejections (rule 5), not every routine step.
    plan = STARTERS[claim.kind](d, d.step(claim.step_id))
    return d.change(claim=claim), plan


Next = tuple[Claim, CallPlan] | None


def decide_result(
    aggregate: OrderAggregate,
    claim: Claim,
    outcome: Outcome,
    ctx: Context,
    *,
    chain: bool = False,
) -> tuple[Change, Next]:
    """Commit the outcome of attempt `claim.attempt` and everything it leads to.

    With `chain`, a next step this result makes due now is leased to the same executor and its
    intent recorded in the same transaction (rule 4 holds: the intent of step n+1 commits with
    the result of step n, before any call of step n+1); the caller goes on with it directly.
    """
    d = Draft(aggregate, ctx)
    if not guard_holds(aggregate, claim, ctx):
        if aggregate.holds(claim.guard):
            # The lease ran out but nobody took the step over yet: the store would apply this
            # change, so the rejection is written as its only part (under the same guard).
            d.audit.append(d.rejection(claim, "lease_expired"))
        return d.change(claim=claim), None
    step = finish_attempt(d, d.step(claim.step_id), outcome_name(outcome), detail(outcome))
    HANDLERS[claim.kind](d, step, outcome)
    following = _start_following(d, aggregate, claim) if chain else None
    return d.change(claim=claim), following


def _start_following(d: Draft, before: OrderAggregate, claim: Claim) -> Next:
    due = [
        s
        for s in d.new_steps(before)
        if s.kind in MAINLINE_KINDS
        and s.status is StepStatus.PENDING
        and s.next_attempt_at is not None
        and s.next_attempt_at <= d.now
    ]
    if not due:
        return None
    step = due[0]
    lease = d.now + seconds(d.ctx.timing.lease_s)
    following = Claim(step.step_id, step.order_id, step.kind, step.attempt + 1, claim.owner, lease)
    running = d.update_step(
        step.step_id,
        status=StepStatus.RUNNING,
        attempt=following.attempt,
        lease_owner=claim.owner,
        lease_expires_at=lease,
    )
    open_attempt(d, running, following)
    plan = STARTERS[step.kind](d, d.step(step.step_id))
    return (following, plan) if plan is not None else None


# -- reserve -----------------------------------------------------------------------------------
def _start_reserve(d: Draft, step: Step) -> CallPlan | None:
    if d.order.state is OrderState.CREATED:
        d.move(OrderState.RESERVING, "reserve step started")
    return CallPlan(StepKind.RESERVE, call_for(d, step), items=d.order.items)


def _on_reserve(d: Draft, step: Step, outcome: Outcome) -> None:
    if isinstance(outcome, Succeeded):
        succeed(d, step, outcome.result)
        ttl = d.ctx.timing.reservation_ttl_s
        d.set_order(
            reservation_id=str(outcome.result.get("reservation_id", "")) or None,
            reservation_status="held",
            reserved_at=d.now,
            reservation_expires_at=d.now + seconds(ttl),
        )
        d.move(OrderState.RESERVED, "warehouse confirmed")
        d.new_step(StepKind.CHARGE)
        d.new_step(StepKind.EXPIRE_RESERVATION, delay_s=ttl)
    elif isinstance(outcome, Refused):
        stop(d, step, StepStatus.FAILED, outcome.code)
        d.move(OrderState.RESERVATION_FAILED, outcome.code)
    else:
        retry_or_stop(d, step, outcome)


# -- ship --------------------------------------------------------------------------------------
def _start_ship(d: Draft, step: Step) -> CallPlan | None:
    if d.order.state is OrderState.PAID:
        d.move(OrderState.SHIPPING, "ship step started")
    return CallPlan(StepKind.SHIP, call_for(d, step), items=d.order.items)


def _on_ship(d: Draft, step: Step, outcome: Outcome) -> None:
    if isinstance(outcome, Succeeded):
        succeed(d, step, outcome.result)
        d.move(OrderState.SHIPPED, "carrier confirmed")
    elif isinstance(outcome, Refused):
        stop(d, step, StepStatus.FAILED, outcome.code)
        d.move(OrderState.SHIPPING_FAILED, outcome.code)
    elif retry_or_stop(d, step, outcome) is StepStatus.FAILED:
        d.move(OrderState.SHIPPING_FAILED, "shipping retries exhausted")


# -- release (compensation) --------------------------------------------------------------------
def _start_release(d: Draft, step: Step) -> CallPlan | None:
    reserve = d.latest(StepKind.RESERVE)
    key = reserve.idempotency_key if reserve else ""
    return CallPlan(StepKind.RELEASE_RESERVATION, call_for(d, step), reservation_key=key)


def _on_release(d: Draft, step: Step, outcome: Outcome) -> None:
    if not isinstance(outcome, Succeeded):
        retry_or_stop(d, step, Broken(outcome.code) if isinstance(outcome, Refused) else outcome)
        return
    succeed(d, step, outcome.result)
    status = str(outcome.result.get("status", "released"))
    d.set_order(reservation_status=status)
    d.emit("reservation.released", {"status": status, "step_id": str(step.step_id)})
    d.note("compensation.release_reservation", status, step.step_id)
    if d.order.state is OrderState.CANCELLING:
        d.move(OrderState.CANCELLED, "reservation released after cancel")
    elif d.order.state is OrderState.RELEASING:
        d.move(OrderState.PAYMENT_FAILED, d.order.state_reason or "reservation released")


# -- refund (its own operation) ----------------------------------------------------------------
def _start_refund(d: Draft, step: Step) -> CallPlan | None:
    assert step.refund_id is not None
    refund = d.put_refund(
        attrs.evolve(d.refund(step.refund_id), status=RefundStatus.PROCESSING, updated_at=d.now)
    )
    return CallPlan(
        StepKind.REFUND,
        call_for(d, step),
        amount_minor=refund.amount_minor,
        payment_reference=d.order.payment_reference or "",
    )


def _on_refund(d: Draft, step: Step, outcome: Outcome) -> None:
    assert step.refund_id is not None
    refund = d.refund(step.refund_id)
    if isinstance(outcome, Succeeded):
        succeed(d, step, outcome.result)
        ref = str(outcome.result.get("refund_reference", "")) or None
        _set_refund(d, refund.refund_id, RefundStatus.SUCCEEDED, refund_reference=ref)
        refunded = sum(r.amount_minor for r in d.refunds if r.status is RefundStatus.SUCCEEDED)
        if d.order.state is OrderState.SHIPPING_FAILED and refunded >= d.order.total_minor:
            d.move(OrderState.REFUNDED, "full refund succeeded")
            payment.release_after_refund(d)
        return
    if isinstance(outcome, Refused):
        stop(d, step, StepStatus.FAILED, outcome.code)
        _set_refund(d, refund.refund_id, RefundStatus.FAILED, last_error=outcome.code)
        return
    # A refund repeated under its key is de-duplicated by the provider: unknown is retried.
    retryable = Transient(outcome.detail) if isinstance(outcome, UnknownOutcome) else outcome
    status = retry_or_stop(d, step, retryable)
    if status is StepStatus.FAILED:
        _set_refund(
            d, refund.refund_id, RefundStatus.FAILED, last_error=d.step(step.step_id).last_error
        )
    elif status is StepStatus.BLOCKED:
        _set_refund(
            d, refund.refund_id, RefundStatus.BLOCKED, last_error=d.step(step.step_id).last_error
        )


def _set_refund(
    d: Draft,
    refund_id: UUID,
    status: RefundStatus,
    *,
    refund_reference: str | None = None,
    last_error: str | None = None,
) -> None:
    refund = d.refund(refund_id)
    refund = d.put_refund(
        attrs.evolve(
            refund,
            status=status,
            updated_at=d.now,
            refund_reference=refund_reference or refund.refund_reference,
            last_error=last_error,
        )
    )
    d.emit(
        f"refund.{status.value}",
        {"refund_id": str(refund.refund_id), "amount_minor": refund.amount_minor},
    )
    d.note(
        "compensation.refund",
        status.value,
        refund.step_id,
        refund_id=str(refund.refund_id),
        amount_minor=refund.amount_minor,
    )


Starter = Callable[[Draft, Step], CallPlan | None]
Handler = Callable[[Draft, Step, Outcome], None]

STARTERS: dict[StepKind, Starter] = {
    StepKind.RESERVE: _start_reserve,
    StepKind.CHARGE: payment.start_charge,
    StepKind.RECONCILE_PAYMENT: payment.start_reconcile,
    StepKind.SHIP: _start_ship,
    StepKind.RELEASE_RESERVATION: _start_release,
    StepKind.EXPIRE_RESERVATION: payment.fire_expiry,
    StepKind.REFUND: _start_refund,
}

HANDLERS: dict[StepKind, Handler] = {
    StepKind.RESERVE: _on_reserve,
    StepKind.CHARGE: payment.on_charge,
    StepKind.RECONCILE_PAYMENT: payment.on_reconcile,
    StepKind.SHIP: _on_ship,
    StepKind.RELEASE_RESERVATION: _on_release,
    StepKind.EXPIRE_RESERVATION: payment.on_expiry_result,
    StepKind.REFUND: _on_refund,
}
