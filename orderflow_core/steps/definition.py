"""What one step kind is, as a value: the registry holds one `StepDefinition` per `StepKind`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import attrs

from orderflow_core.draft import Draft
from orderflow_core.model import Step
from orderflow_core.outcomes import Outcome
from orderflow_core.ports import CallContext, Services
from orderflow_core.states import StepKind


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

Starter = Callable[[Draft, Step], CallPlan | None]
Handler = Callable[[Draft, Step, Outcome], None]
Perform = Callable[[Services, CallPlan], Awaitable[Outcome]]


@attrs.frozen
class StepDefinition:
    """One step kind.

    `start` records what starting an attempt does to the order (under its lock) and returns the
    call to make, or None when the step decided without calling out. `perform` makes that call
    through the port; `operation` says how its answer is classified (None with `perform`: the
    step calls no service). `on_result` commits what the outcome means.
    """

    kind: StepKind
    start: Starter
    on_result: Handler
    perform: Perform | None = None
    operation: Operation | None = None

    def __attrs_post_init__(self) -> None:
        if (self.perform is None) != (self.operation is None):
            raise ValueError(f"{self.kind}: a step that calls out needs both perform and operation")


def is_text(value: object) -> bool:
    """A non-empty string (what the success shapes ask of ids and references)."""
    return isinstance(value, str) and bool(value)


def request_of(plan: CallPlan, kind: type[R]) -> R:
    """The plan's request, checked to be the step kind's own request type."""
    if not isinstance(plan.request, kind):
        raise TypeError(f"{plan.kind} expects a {kind.__name__}, got {type(plan.request)}")
    return plan.request
