"""What happens to a step as an attempt starts and ends: success, stop, or a scheduled retry."""

from __future__ import annotations

from datetime import timedelta

import attrs

from orderflow_core.draft import Draft
from orderflow_core.model import Attempt, Claim, Step
from orderflow_core.outcomes import (
    Broken,
    Outcome,
    Refused,
    Transient,
    UnknownOutcome,
    outcome_name,
)
from orderflow_core.ports import CallContext
from orderflow_core.retry import Block, GiveUp, RetryAt
from orderflow_core.states import AttemptOutcome, StepStatus
from orderflow_core.vocabulary import step_audit


def detail(outcome: Outcome) -> str:
    if isinstance(outcome, Refused):
        return outcome.code
    if isinstance(outcome, Transient | UnknownOutcome | Broken):
        return outcome.detail
    return ""


def open_attempt(d: Draft, step: Step, claim: Claim) -> Step:
    """Record the intent of attempt `claim.attempt`; an earlier attempt that never reported
    back (a crash, a lost lease) is closed as abandoned."""
    attempts = tuple(
        attrs.evolve(
            a, finished_at=d.now, outcome=AttemptOutcome.ABANDONED, error="no result recorded"
        )
        if a.outcome is None
        else a
        for a in step.attempts
    )
    intent = Attempt(claim.attempt, d.now, claim.owner)
    return d.put_step(attrs.evolve(step, attempts=(*attempts, intent)))


def finish_attempt(d: Draft, step: Step, outcome: AttemptOutcome, error: str) -> Step:
    """Close the step's last attempt with its outcome."""
    attempts = tuple(
        attrs.evolve(a, finished_at=d.now, outcome=outcome, error=error or None)
        if a.attempt == step.attempt and a.outcome is None
        else a
        for a in step.attempts
    )
    return d.put_step(attrs.evolve(step, attempts=attempts))


def relabel_attempt(d: Draft, step: Step, outcome: AttemptOutcome, error: str) -> Step:
    """Correct the outcome recorded on the step's last attempt once its answer is read: a call
    that went through can carry an answer that is no success (a status check that finds the
    charge still pending), and the attempt says what happened, not that the call went through."""
    attempts = tuple(
        attrs.evolve(a, outcome=outcome, error=error or None) if a.attempt == step.attempt else a
        for a in step.attempts
    )
    return d.put_step(attrs.evolve(step, attempts=attempts))


def call_for(d: Draft, step: Step) -> CallContext:
    return CallContext(d.order.order_id, step.step_id, step.idempotency_key)


def succeed(d: Draft, step: Step, result: dict[str, object] | None = None) -> Step:
    return d.update_step(
        step.step_id,
        status=StepStatus.SUCCEEDED,
        result=result or {},
        lease_owner=None,
        lease_expires_at=None,
        next_attempt_at=None,
        last_error=None,
    )


def stop(d: Draft, step: Step, status: StepStatus, error: str) -> Step:
    d.note(step_audit(status), error, step.step_id, kind=step.kind.value)
    return d.update_step(
        step.step_id,
        status=status,
        last_error=error,
        lease_owner=None,
        lease_expires_at=None,
        next_attempt_at=None,
    )


def retry_or_stop(d: Draft, step: Step, outcome: Outcome) -> StepStatus:
    """Apply the retry policy; returns the step's new status."""
    if isinstance(outcome, Transient) and outcome.local:
        # A local bulkhead said busy: the service is not to blame, the budget is not spent.
        step = d.update_step(
            step.step_id, armed_attempt=step.armed_attempt + 1, max_attempts=step.max_attempts + 1
        )
    policy = d.ctx.timing.retry
    decision = policy.decide(step.kind, step.attempt - step.armed_attempt, outcome, d.ctx.random)
    error = detail(outcome) or outcome_name(outcome)
    if isinstance(decision, RetryAt):
        d.update_step(
            step.step_id,
            status=StepStatus.RETRY_SCHEDULED,
            last_error=error,
            next_attempt_at=d.now + seconds(decision.delay_s),
            lease_owner=None,
            lease_expires_at=None,
        )
        return StepStatus.RETRY_SCHEDULED
    status = StepStatus.BLOCKED if isinstance(decision, Block) else StepStatus.FAILED
    assert isinstance(decision, Block | GiveUp)
    stop(d, step, status, error)
    return status


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)
