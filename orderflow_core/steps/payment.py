"""The three money step kinds: charge, reconciliation of an unknown outcome, reservation expiry.

The rules this module exists to keep (docs/lifecycle.md): one key never makes two charges; a charge
is re-sent only after the provider said no charge exists under its key; a reservation is never
released while the payment outcome is unknown — only once the money is settled (never taken,
or given back in full by a refund).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from orderflow_core.attempts import (
    call_for,
    finish_attempt,
    relabel_attempt,
    retry_or_stop,
    stop,
    succeed,
)
from orderflow_core.attention import stopped as stopped_attention
from orderflow_core.draft import Draft
from orderflow_core.model import Attempt, OrderAggregate, Step
from orderflow_core.outcomes import Broken, Outcome, Refused, Succeeded, Transient
from orderflow_core.ports import Services
from orderflow_core.states import (
    AttemptOutcome,
    AttentionReason,
    OrderState,
    PaymentStatus,
    ReservationStatus,
    StepKind,
    StepStatus,
)
from orderflow_core.steps.definition import (
    CallPlan,
    Cancel,
    Operation,
    Retry,
    StepDefinition,
    is_text,
    request_of,
)
from orderflow_core.vocabulary import Audit

# Attempt outcomes that prove the provider applied no charge.
# "not_charged": an attempt the provider's status call later proved had charged nothing.
CHARGED_NOTHING = frozenset(
    {
        AttemptOutcome.TRANSIENT,
        AttemptOutcome.REFUSED,
        AttemptOutcome.NOT_SENT,
        AttemptOutcome.NOT_CHARGED,
    }
)
OUTCOME_UNKNOWN = "outcome_unknown"


@attrs.frozen
class ChargeRequest:
    amount_minor: int
    currency: str


@attrs.frozen
class StatusRequest:
    charge_key: str


def charged_nothing(step: Step) -> bool:
    """Every attempt of the charge step is known to have charged nothing."""
    return all(a.outcome in CHARGED_NOTHING for a in step.attempts)


def hold_expired(d: Draft) -> bool:
    """The reservation's hold has run out, whether or not the expiry timer has fired yet."""
    expires = d.order.reservation_expires_at
    return d.order.reservation_expired or (expires is not None and d.now >= expires)


def start_charge(d: Draft, step: Step) -> CallPlan | None:
    """Send the charge — unless an earlier attempt may have charged, or the hold ran out."""
    earlier = [a for a in step.attempts if a.attempt < step.attempt]
    if not all(a.outcome in CHARGED_NOTHING for a in earlier):
        if d.order.state is OrderState.RESERVED:
            d.move(OrderState.PAYING, "charge step started")
        _not_sent(d, step)
        payment_in_doubt(d, d.step(step.step_id), "an earlier attempt's outcome is unknown")
        return None
    if hold_expired(d):
        d.set_order(reservation_expired=True)
        _not_sent(d, step)
        stop(d, d.step(step.step_id), StepStatus.CANCELLED, "reservation_expired")
        _release(d, "reservation_expired")
        return None
    if d.order.state is OrderState.RESERVED:
        d.move(OrderState.PAYING, "charge step started")
    d.set_order(payment_status=PaymentStatus.IN_FLIGHT)
    request = ChargeRequest(d.order.total_minor, d.order.currency)
    return CallPlan(StepKind.CHARGE, call_for(d, step), request)


def _not_sent(d: Draft, step: Step) -> None:
    finish_attempt(d, step, AttemptOutcome.NOT_SENT, "decided without calling the provider")


def on_charge(d: Draft, step: Step, outcome: Outcome) -> None:
    """Map the charge's outcome: paid, refused → release, unknown → reconcile, transient → retry."""
    if isinstance(outcome, Succeeded):
        succeed(d, step, outcome.result)
        _paid(d, str(outcome.result.get("payment_reference", "")) or None, "payment confirmed")
    elif isinstance(outcome, Refused):
        stop(d, step, StepStatus.FAILED, outcome.code)
        d.set_order(payment_status=PaymentStatus.FAILED)
        _release(d, outcome.code)
    elif isinstance(outcome, Transient):
        d.set_order(payment_status=PaymentStatus.NONE)
        if hold_expired(d):
            stop(d, step, StepStatus.FAILED, outcome.detail or "transient")
            release_after_expiry(d, d.step(step.step_id))
        else:
            retry_or_stop(d, step, outcome)
    else:
        # Unknown, pending, or a malformed answer: money may have moved. Never re-send blindly.
        payment_in_doubt(d, step, outcome.detail or "outcome unknown")


def payment_in_doubt(d: Draft, step: Step, reason: str) -> None:
    """The charge may have happened: payment_unknown, and a status check unless time ran out."""
    stop(d, step, StepStatus.FAILED, f"{OUTCOME_UNKNOWN}: {reason}")
    d.set_order(payment_status=PaymentStatus.UNKNOWN)
    if d.order.state is OrderState.PAYING:
        d.move(OrderState.PAYMENT_UNKNOWN, reason)
    if not hold_expired(d) and not d.active(StepKind.RECONCILE_PAYMENT):
        d.new_step(StepKind.RECONCILE_PAYMENT)


def release_after_expiry(d: Draft, charge: Step) -> None:
    """The hold ran out: release if nothing can have been charged, else wait for a person."""
    if charged_nothing(d.step(charge.step_id)):
        _release(d, "reservation_expired")
    elif d.order.state is OrderState.PAYING:
        d.move(OrderState.PAYMENT_UNKNOWN, "reservation expired with the payment in doubt")


def _release(d: Draft, reason: str) -> None:
    d.cancel_waiting(StepKind.EXPIRE_RESERVATION, reason)
    d.cancel_waiting(StepKind.CHARGE, reason)
    d.move(OrderState.RELEASING, reason)
    d.new_step(StepKind.RELEASE_RESERVATION)
    d.note(Audit.RELEASE_RESERVATION, "requested", reason=reason)


def release_after_refund(d: Draft) -> None:
    """A full refund ended the order: the money is settled (given back), so the stock held for
    it goes back too — a compensation under the reserve call's key, like every release."""
    held = d.order.reservation_status is ReservationStatus.HELD
    if not held or d.active(StepKind.RELEASE_RESERVATION):
        return
    step = d.new_step(StepKind.RELEASE_RESERVATION)
    d.note(Audit.RELEASE_RESERVATION, "requested", step.step_id, reason="refunded")


def _paid(d: Draft, reference: str | None, reason: str) -> None:
    d.set_order(payment_status=PaymentStatus.SUCCEEDED, payment_reference=reference)
    d.cancel_waiting(StepKind.RECONCILE_PAYMENT, "payment confirmed")
    d.cancel_waiting(StepKind.EXPIRE_RESERVATION, "payment confirmed")
    d.move(OrderState.PAID, reason)
    d.advance(StepKind.CHARGE)  # the charge succeeded, whoever found out


# -- reconciliation ----------------------------------------------------------------------------
def start_reconcile(d: Draft, step: Step) -> CallPlan | None:
    """Ask the provider what happened under the charge's key (a read, safe to repeat)."""
    charge = d.latest(StepKind.CHARGE)
    if d.order.state is not OrderState.PAYMENT_UNKNOWN or charge is None:
        finish_attempt(d, step, AttemptOutcome.NOT_SENT, "payment no longer unknown")
        succeed(d, d.step(step.step_id), {"skipped": "payment no longer unknown"})
        return None
    request = StatusRequest(charge.idempotency_key)
    return CallPlan(StepKind.RECONCILE_PAYMENT, call_for(d, step), request)


def on_reconcile(d: Draft, step: Step, outcome: Outcome) -> None:
    """succeeded → paid; failed → release; no charge → re-send with the same key."""
    charge = d.latest(StepKind.CHARGE)
    if d.order.state is not OrderState.PAYMENT_UNKNOWN or charge is None:
        succeed(d, step, {"skipped": "payment no longer unknown"})
        return
    if isinstance(outcome, Refused) and outcome.code == "not_found":
        _no_charge_found(d, step, charge)
        return
    if not isinstance(outcome, Succeeded):
        retry_or_stop(d, step, Broken(outcome.code) if isinstance(outcome, Refused) else outcome)
        return
    status = outcome.result.get("status")
    if status == "succeeded":
        succeed(d, step, outcome.result)
        reference = str(outcome.result.get("payment_reference", "")) or None
        succeed(d, charge, outcome.result)
        _paid(d, reference, "reconciliation confirmed the charge")
    elif status == "failed":
        succeed(d, step, outcome.result)
        d.set_order(payment_status=PaymentStatus.FAILED)
        _release(d, "payment_failed")
    elif status == "pending":
        step = relabel_attempt(d, step, AttemptOutcome.PENDING, "charge pending")
        retry_or_stop(d, step, Transient("charge pending"))
    else:
        problem = f"unexpected status {status!r}"
        step = relabel_attempt(d, step, AttemptOutcome.BROKEN, problem)
        retry_or_stop(d, step, Broken(problem))


def _no_charge_found(d: Draft, step: Step, charge: Step) -> None:
    if charge.status is StepStatus.RUNNING:
        retry_or_stop(d, step, Transient("a charge attempt is still in flight"))
        return
    succeed(d, step, {"status": "not_found"})
    d.set_order(payment_status=PaymentStatus.NONE)
    if hold_expired(d):
        _release(d, "reservation_expired")
        return
    budget = d.ctx.timing.retry.attempts_per_budget
    d.update_step(
        charge.step_id,
        status=StepStatus.PENDING,
        next_attempt_at=d.now,
        armed_attempt=charge.attempt,
        max_attempts=charge.attempt + budget,
        last_error=None,
        lease_owner=None,
        lease_expires_at=None,
        # What the provider said makes every earlier attempt "charged nothing".
        attempts=tuple(
            a if a.outcome in CHARGED_NOTHING else _as_not_charged(a) for a in charge.attempts
        ),
    )
    d.move(OrderState.PAYING, "reconciliation found no charge: re-send with the same key")


def _as_not_charged(attempt: Attempt) -> Attempt:
    return attrs.evolve(attempt, outcome=AttemptOutcome.NOT_CHARGED)


# -- reservation expiry ------------------------------------------------------------------------
def fire_expiry(d: Draft, step: Step) -> CallPlan | None:
    """The 15-minute hold ran out: release only if no charge can have taken effect."""
    finish_attempt(d, step, AttemptOutcome.SUCCEEDED, "")
    succeed(d, d.step(step.step_id), {"state_at_expiry": d.order.state.value})
    state = d.order.state
    if state not in (OrderState.RESERVED, OrderState.PAYING, OrderState.PAYMENT_UNKNOWN):
        return None
    d.set_order(reservation_expired=True)
    d.note(Audit.RESERVATION_EXPIRED, state.value, step.step_id)
    charge = d.latest(StepKind.CHARGE)
    if state is OrderState.PAYMENT_UNKNOWN:
        d.cancel_waiting(StepKind.RECONCILE_PAYMENT, "reservation expired: manual reconciliation")
    elif charge is None:
        _release(d, "reservation_expired")
    elif state is OrderState.RESERVED or charge.status is not StepStatus.RUNNING:
        if charge.status is StepStatus.RUNNING:
            # Still `reserved`, so this charge never started (its start moves the order to
            # `paying` before it returns a call): a claim leased it beside this timer and its
            # start has not run yet. Stopped here, that start finds its lease gone and sends
            # nothing.
            charge = stop(d, charge, StepStatus.CANCELLED, "reservation_expired")
        release_after_expiry(d, charge)
    else:
        d.move(OrderState.PAYMENT_UNKNOWN, "reservation expired with a charge in flight")
    return None


def on_expiry_result(d: Draft, step: Step, outcome: Outcome) -> None:
    """The expiry timer never calls out, so it never has a result to commit."""
    raise AssertionError("expire_reservation makes no external call")


# -- what the money kinds say of the order -----------------------------------------------------
MONEY_STEPS = (StepKind.RECONCILE_PAYMENT, StepKind.CHARGE)


def money_attention(aggregate: OrderAggregate, step: Step) -> AttentionReason | None:
    """With the payment in doubt, the order waits once no status check or charge is due or
    running: the checks gave up, or (none left to run) the hold ran out first."""
    if aggregate.order.state is not OrderState.PAYMENT_UNKNOWN:
        return stopped_attention(aggregate, step)
    if any(s.is_due_or_running for s in aggregate.steps if s.kind in MONEY_STEPS):
        return None
    reconcile = aggregate.latest(StepKind.RECONCILE_PAYMENT)
    if reconcile is not None and reconcile.is_stopped:
        return AttentionReason.RECONCILE_GAVE_UP
    return AttentionReason.EXPIRED_WHILE_UNKNOWN


def charge_not_retryable(aggregate: OrderAggregate, step: Step) -> str | None:
    """A charge that may have taken money is never re-sent blindly: reconcile instead."""
    unknown = aggregate.order.state is OrderState.PAYMENT_UNKNOWN
    if unknown or (step.last_error or "").startswith(OUTCOME_UNKNOWN):
        return "the payment outcome is unknown: reconcile instead"
    return None


# -- the three money step kinds ----------------------------------------------------------------
PAYMENT_STATUSES = frozenset({"succeeded", "failed", "pending"})


async def _charge(services: Services, plan: CallPlan) -> Outcome:
    request = request_of(plan, ChargeRequest)
    return await services.payments.charge(plan.call, request.amount_minor, request.currency)


def _charge_well_formed(body: Mapping[str, Any]) -> bool:
    return body.get("status") == "succeeded" and is_text(body.get("payment_reference"))


async def _status(services: Services, plan: CallPlan) -> Outcome:
    return await services.payments.charge_status(
        plan.call, request_of(plan, StatusRequest).charge_key
    )


def _status_well_formed(body: Mapping[str, Any]) -> bool:
    status = body.get("status")
    if status not in PAYMENT_STATUSES:
        return False
    return status != "succeeded" or is_text(body.get("payment_reference"))


CHARGE = StepDefinition(
    kind=StepKind.CHARGE,
    start=start_charge,
    on_result=on_charge,
    perform=_charge,
    operation=Operation(
        "charge",
        "payments",
        frozenset({(402, "card_declined")}),
        _charge_well_formed,
        pending_is_unknown=True,
    ),
    attention=money_attention,
    retry=Retry(refused=charge_not_retryable),
    # Before it started nothing was charged: the stock is released and the order cancelled.
    cancel=Cancel(due_in=OrderState.RESERVED),
)
RECONCILE_PAYMENT = StepDefinition(
    kind=StepKind.RECONCILE_PAYMENT,
    start=start_reconcile,
    on_result=on_reconcile,
    perform=_status,
    operation=Operation("status", "payments", frozenset({(404, "not_found")}), _status_well_formed),
    attention=money_attention,
)
EXPIRE_RESERVATION = StepDefinition(
    kind=StepKind.EXPIRE_RESERVATION,
    start=fire_expiry,
    on_result=on_expiry_result,
    mainline=False,  # a timer beside the sequence
)
