"""What one step kind is, as a value: the registry holds one `StepDefinition` per `StepKind`.

A definition carries everything the engine knows of its kind (docs/step-kinds.md): how a step
starts, the call it makes and how its answers read, what each result does, and the kind's facts
— whether it carries the order forward (`mainline`), why an order waits on it (`attention`),
who may retry it and when (`retry`), when the order may be cancelled while it is the current
step (`cancel`), and the service it needs (its operation's). What a success leads to is not
here: the process version says it (`Process.then`), so a version can insert or reorder steps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import attrs

from orderflow_core.attention import Attention, stopped
from orderflow_core.draft import Draft
from orderflow_core.model import OrderAggregate, Step
from orderflow_core.outcomes import Outcome
from orderflow_core.ports import CallContext, Services
from orderflow_core.states import OrderState, Role, StepKind, StepStatus


@attrs.frozen
class CallPlan:
    """The call one started attempt makes, decided while the order was locked: the step kind,
    the identity every call carries, and the kind's own request value (see its step module)."""

    kind: StepKind
    call: CallContext
    request: object = None


@attrs.frozen
class Operation:
    """How the answers of one operation of an external service read as an `Outcome`.

    `refusals`: the documented permanent refusals, as (HTTP status, code) pairs.
    `well_formed`: what a 2xx body must contain to count as a success.
    `pending_is_unknown`: a 2xx `{"status": "pending"}` means the outcome is not known yet.
    """

    name: str
    service: str
    refusals: frozenset[tuple[int, str]]
    well_formed: Callable[[Mapping[str, Any]], bool]
    pending_is_unknown: bool = False


R = TypeVar("R")

ANYONE = frozenset({Role.CUSTOMER, Role.OPERATOR})
OPERATOR = frozenset({Role.OPERATOR})


def _never(aggregate: OrderAggregate, step: Step) -> str | None:
    del aggregate, step
    return None


def _nothing(d: Draft, step: Step) -> None:
    del d, step


@attrs.frozen
class Retry:
    """Who may re-arm a stopped step of this kind (same key, a fresh budget), and when.

    `failed`: the roles that may re-arm it once it stopped (an operator always may; a blocked
    step — a permanent technical error — is an operator's only, whatever the kind).
    `others_refused`: what a role outside `failed` is told. `refused`: why a stopped step may
    still not be retried now (None: it may). `rearm`: what re-arming does to the order besides
    the step.
    """

    failed: frozenset[Role] = ANYONE
    others_refused: str = ""
    refused: Callable[[OrderAggregate, Step], str | None] = _never
    rearm: Callable[[Draft, Step], None] = _nothing


@attrs.frozen
class Cancel:
    """When the order may be cancelled while a step of this kind is its current step: while the
    step waits to run with the order in `due_in`, or once it stopped with the order in
    `stopped_in` (None: never then)."""

    due_in: OrderState | None = None
    stopped_in: OrderState | None = None

    def allows(self, state: OrderState, step: Step) -> bool:
        if step.is_due_or_running:
            return step.status is not StepStatus.RUNNING and state is self.due_in
        return step.is_stopped and state is self.stopped_in

Starter = Callable[[Draft, Step], CallPlan | None]
Handler = Callable[[Draft, Step, Outcome], None]
Perform = Callable[[Services, CallPlan], Awaitable[Outcome]]


@attrs.frozen
class StepDefinition:
    """One step kind.

    `start` records what starting an attempt does to the order (under its lock) and returns the
    call to make, or None when the step decided without calling out. `perform` makes that call
    through the port; `operation` says how its answer is classified (None with `perform`: the
    step calls no service). `on_result` commits what the outcome means; a success that carries
    the order forward calls `Draft.advance`, and the process version adds what comes next.

    The kind's facts: `mainline` (its steps carry the order forward: the newest is the order's
    current step), `outlives_order` (it runs after the order ended, and its stop makes even an
    ended order wait), `attention` (why an order waits on a step of this kind), `retry` and
    `cancel` (see `Retry` and `Cancel`; None: the order cannot be cancelled at this step).
    """

    kind: StepKind
    start: Starter
    on_result: Handler
    perform: Perform | None = None
    operation: Operation | None = None
    mainline: bool = True
    outlives_order: bool = False
    attention: Attention = stopped
    retry: Retry = Retry()
    cancel: Cancel | None = None

    def __attrs_post_init__(self) -> None:
        if (self.perform is None) != (self.operation is None):
            raise ValueError(f"{self.kind}: a step that calls out needs both perform and operation")

    @property
    def service(self) -> str | None:
        """The service its calls need (None: it calls none)."""
        return self.operation.service if self.operation is not None else None


def is_text(value: object) -> bool:
    """A non-empty string (what the success shapes ask of ids and references)."""
    return isinstance(value, str) and bool(value)


def request_of(plan: CallPlan, kind: type[R]) -> R:
    """The plan's request, checked to be the step kind's own request type."""
    if not isinstance(plan.request, kind):
        raise TypeError(f"{plan.kind} expects a {kind.__name__}, got {type(plan.request)}")
    return plan.request
