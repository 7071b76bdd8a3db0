"""The registry: every step kind's one definition, and the operations their calls make.

Adding a step kind: a `StepKind` value, a step module with its `DEFINITION`, a line here, the
port its call goes through (orderflow_core/ports.py) and that port's adapters.
"""

from __future__ import annotations

from collections.abc import Mapping

from orderflow_core import payment
from orderflow_core.outcomes import Outcome
from orderflow_core.ports import Services
from orderflow_core.states import StepKind
from orderflow_core.steps import notify, refund, release, reserve, ship
from orderflow_core.steps.definition import CallPlan, Operation, StepDefinition

STEPS: Mapping[StepKind, StepDefinition] = {
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

# Every operation a step calls, by the name the clients, the simulator and the ledger use.
OPERATIONS: Mapping[str, Operation] = {
    d.operation.name: d.operation for d in STEPS.values() if d.operation is not None
}


def definition(kind: StepKind) -> StepDefinition:
    """The definition of `kind` (KeyError for a kind nobody defined)."""
    return STEPS[kind]


async def perform(plan: CallPlan, services: Services) -> Outcome:
    """Make the call a started step planned, through the port its definition names."""
    step = STEPS[plan.kind]
    if step.perform is None:
        raise ValueError(f"{plan.kind} calls no service")
    return await step.perform(services, plan)
