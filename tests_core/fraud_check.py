"""A test-only process version 3: a fraud check inserted between `reserved` and `paying`.

It is written as an embedder would write it, from outside the package and touching no file
of it: a step kind (`FRAUD_CHECK`, with its definition and facts), and a process version whose
sequence puts it after the reserve step and before the charge (`then`). `registered()` makes
both known while a test runs and forgets them after.

The check decides on the order itself, without calling a service: an order whose total is
above `LIMIT_MINOR` is refused as suspected fraud (the stock is released, the order ends
`payment_failed`, no money is ever asked for); any other goes on to the charge.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from orderflow_core import process
from orderflow_core.attempts import finish_attempt, stop, succeed
from orderflow_core.draft import Draft
from orderflow_core.model import Step
from orderflow_core.outcomes import Outcome
from orderflow_core.process import EDGES_V1, PROCESSES, THEN_V1, Process
from orderflow_core.states import AttemptOutcome, OrderState, StepKind, StepStatus
from orderflow_core.steps import registry
from orderflow_core.steps.definition import OPERATOR, CallPlan, Cancel, Retry, StepDefinition
from orderflow_core.vocabulary import Audit

FRAUD_CHECK = StepKind("fraud_check")
LIMIT_MINOR = 20_000
SUSPECTED = "fraud_suspected"
VERSION = 3


def start(d: Draft, step: Step) -> CallPlan | None:
    """Decide at once (no call): pass on to the charge, or refuse and release the stock."""
    if d.order.state is not OrderState.RESERVED:
        # The hold ran out (or the order moved on) before the check ran: nothing to decide.
        finish_attempt(d, step, AttemptOutcome.NOT_SENT, "order no longer reserved")
        succeed(d, d.step(step.step_id), {"skipped": d.order.state.value})
        return None
    if d.order.total_minor > LIMIT_MINOR:
        finish_attempt(d, step, AttemptOutcome.REFUSED, SUSPECTED)
        stop(d, d.step(step.step_id), StepStatus.FAILED, SUSPECTED)
        d.cancel_waiting(StepKind.EXPIRE_RESERVATION, SUSPECTED)
        d.move(OrderState.RELEASING, SUSPECTED)
        d.new_step(StepKind.RELEASE_RESERVATION)
        d.note(Audit.RELEASE_RESERVATION, "requested", reason=SUSPECTED)
        return None
    finish_attempt(d, step, AttemptOutcome.SUCCEEDED, "")
    succeed(d, d.step(step.step_id), {"verdict": "pass"})
    d.advance(FRAUD_CHECK)
    return None


def on_result(d: Draft, step: Step, outcome: Outcome) -> None:
    """The check never calls out, so it never has a result to commit."""
    raise AssertionError("the fraud check makes no external call")


DEFINITION = StepDefinition(
    kind=FRAUD_CHECK,
    start=start,
    on_result=on_result,
    # While it waits to run nothing was charged: the order may be cancelled (stock released).
    cancel=Cancel(due_in=OrderState.RESERVED),
    retry=Retry(OPERATOR, "only an operator may retry a fraud check"),
)

V3 = Process(
    VERSION,
    "version 2 with a fraud check between reserved and paying (tests only)",
    {**EDGES_V1, (OrderState.RESERVED, OrderState.RELEASING): "expired, or fraud suspected"},
    PROCESSES[2].steps | {FRAUD_CHECK},
    then={
        **PROCESSES[2].then,
        StepKind.RESERVE: (FRAUD_CHECK,),
        FRAUD_CHECK: THEN_V1[StepKind.RESERVE],
    },
)


@contextmanager
def registered() -> Iterator[None]:
    """The fraud check and version 3 are known inside the block, and forgotten after."""
    registry.add(DEFINITION)
    process.add(V3)
    try:
        yield
    finally:
        process.remove(VERSION)
        registry.remove(FRAUD_CHECK)

