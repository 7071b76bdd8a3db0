"""The saga: start a step and commit its result, as the step kind's definition says
(orderflow_core/steps/).

Two pure entry points, both run by the store while the order is locked:
`decide_start` (the intent, committed before any external call) and `decide_result`
(outcome + transition + next steps + events + audit, committed under the step's generation).
"""

from __future__ import annotations

from orderflow_core.attempts import detail, finish_attempt, open_attempt, seconds
from orderflow_core.context import Context
from orderflow_core.draft import Draft
from orderflow_core.model import Change, Claim, OrderAggregate
from orderflow_core.outcomes import Outcome, outcome_name
from orderflow_core.process import process_for
from orderflow_core.states import StepKind, StepStatus
from orderflow_core.steps.definition import CallPlan
from orderflow_core.steps.registry import STEPS, definition


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
    d = Draft(aggregate, ctx, STEPS)
    if not guard_holds(aggregate, claim, ctx):
        return d.change(claim=claim), None
    _check_kind(aggregate, claim.kind)
    open_attempt(d, d.step(claim.step_id), claim)
    # The attempt row is the record of the intent; the audit log keeps compensations, manual
    # decisions, stops and rejections (rule 5), not every routine step.
    plan = definition(claim.kind).start(d, d.step(claim.step_id))
    return d.change(claim=claim), plan


Next = tuple[Claim, CallPlan] | None


def success_ends_sequence(version: int, kind: StepKind) -> bool:
    """Whether a success of `kind` in process `version` leaves no step for its executor to
    chain: the kind is on the version's main sequence and no mainline kind follows it (version
    1's ship; version 2's ship, followed by the notification beside the sequence). Known before
    the result is decided, so the executor frees the attempt's slot before its commit instead of
    after. A kind not on the sequence (a reconciliation, whose success leads to shipping) may
    chain; so may any other outcome."""
    process = process_for(version)
    on_sequence = kind == process.first or any(kind in ks for ks in process.then.values())
    return on_sequence and not any(STEPS[k].mainline for k in process.then.get(kind, ()))


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
    d = Draft(aggregate, ctx, STEPS)
    if not guard_holds(aggregate, claim, ctx):
        if aggregate.holds(claim.guard):
            # The lease ran out but nobody took the step over yet: the store would apply this
            # change, so the rejection is written as its only part (under the same guard).
            d.audit.append(d.rejection(claim, "lease_expired"))
        return d.change(claim=claim), None
    step = finish_attempt(d, d.step(claim.step_id), outcome_name(outcome), detail(outcome))
    _check_kind(aggregate, claim.kind)
    definition(claim.kind).on_result(d, step, outcome)
    following = _start_following(d, aggregate, claim) if chain else None
    return d.change(claim=claim), following


def _check_kind(aggregate: OrderAggregate, kind: StepKind) -> None:
    process = process_for(aggregate.order.process_version)
    if kind not in process.steps:
        raise ValueError(f"process version {process.version} has no {kind} step")


def _start_following(d: Draft, before: OrderAggregate, claim: Claim) -> Next:
    due = [
        s
        for s in d.new_steps(before)
        if STEPS[s.kind].mainline
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
    plan = definition(step.kind).start(d, d.step(step.step_id))
    return (following, plan) if plan is not None else None
