"""The registry: every step kind's one definition, and the operations their calls make.

Adding a step kind (docs/step-kinds.md): a step module with its `DEFINITION` (its facts
included) and a line here, or `add(definition)` from outside the package; a process version
that runs it and says where it goes in the sequence (orderflow_core/process.py); and, if it
calls a service, the port its call goes through (orderflow_core/ports.py) and its adapters.
"""

from __future__ import annotations

from collections.abc import Mapping

from orderflow_core import attention
from orderflow_core.model import OrderAggregate, Step
from orderflow_core.outcomes import Outcome
from orderflow_core.ports import Services
from orderflow_core.process import process_for
from orderflow_core.states import AttentionReason, StepKind
from orderflow_core.steps import notify, payment, refund, release, reserve, ship
from orderflow_core.steps.definition import CallPlan, Operation, StepDefinition

_STEPS: dict[StepKind, StepDefinition] = {
    definition.kind: definition
    for definition in (
        reserve.DEFINITION,
        payment.CHARGE,
        payment.RECONCILE_PAYMENT,
        ship.DEFINITION,
        release.DEFINITION,
        payment.EXPIRE_RESERVATION,
        refund.DEFINITION,
        notify.DEFINITION,
    )
}
# Every known kind's definition (the package's own and those added with `add`).
STEPS: Mapping[StepKind, StepDefinition] = _STEPS
BUILT_IN = frozenset(_STEPS)

# Every operation a step calls, by the name the clients, the simulator and the ledger use.
_OPERATIONS: dict[str, Operation] = {
    d.operation.name: d.operation for d in STEPS.values() if d.operation is not None
}
OPERATIONS: Mapping[str, Operation] = _OPERATIONS


def add(definition: StepDefinition) -> None:
    """Make a kind known (an embedder's or a test's); a kind defined twice is an error unless
    it is the same definition."""
    known = _STEPS.get(definition.kind)
    if known is not None and known is not definition:
        raise ValueError(f"step kind {definition.kind} is already defined")
    operation = definition.operation
    if operation is not None and _OPERATIONS.get(operation.name, operation) != operation:
        raise ValueError(f"operation {operation.name} is already defined")
    _STEPS[definition.kind] = definition
    if operation is not None:
        _OPERATIONS[operation.name] = operation


def remove(kind: StepKind) -> None:
    """Forget an added kind (a test's, once it ran); the package's own cannot be removed."""
    if kind in BUILT_IN:
        raise ValueError(f"{kind} is one of the package's own step kinds")
    definition = _STEPS.pop(kind, None)
    if definition is not None and definition.operation is not None:
        _OPERATIONS.pop(definition.operation.name, None)


def definition(kind: StepKind) -> StepDefinition:
    """The definition of `kind` (KeyError for a kind nobody defined)."""
    return STEPS[kind]


def services_needed(version: int) -> frozenset[str]:
    """The services the steps of process `version` call (by their operations' service)."""
    kinds = process_for(version).steps
    return frozenset(d.service for k in kinds if (d := STEPS[k]).service is not None)


def current_step(aggregate: OrderAggregate) -> Step | None:
    """The order's current step: the newest mainline step that was not cancelled."""
    return attention.current_step(aggregate, STEPS)


def waiting_step(aggregate: OrderAggregate) -> Step | None:
    """The step a person would act on (see `attention.waiting_step`)."""
    return attention.waiting_step(aggregate, STEPS)


def attention_reason(aggregate: OrderAggregate) -> AttentionReason | None:
    """Why nothing will move this order until a person acts, or None if something will."""
    return attention.reason(aggregate, STEPS)


async def perform(plan: CallPlan, services: Services) -> Outcome:
    """Make the call a started step planned, through the port its definition names."""
    step = STEPS[plan.kind]
    if step.perform is None:
        raise ValueError(f"{plan.kind} calls no service")
    return await step.perform(services, plan)
