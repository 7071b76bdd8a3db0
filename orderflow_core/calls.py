"""The external call a started step makes: a plain value, performed against the ports."""

from __future__ import annotations

import attrs

from orderflow_core.model import Item
from orderflow_core.outcomes import Outcome
from orderflow_core.ports import CallContext, Services
from orderflow_core.states import StepKind


@attrs.frozen
class CallPlan:
    """Everything needed to call out for one attempt, decided while the order was locked."""

    kind: StepKind
    call: CallContext
    items: tuple[Item, ...] = ()
    amount_minor: int = 0
    currency: str = "RUB"
    reservation_key: str = ""
    charge_key: str = ""
    payment_reference: str = ""


async def perform(plan: CallPlan, services: Services) -> Outcome:
    """Call the port the step kind names; the adapters classify the answer into an Outcome."""
    match plan.kind:
        case StepKind.RESERVE:
            return await services.warehouse.reserve(plan.call, plan.items)
        case StepKind.RELEASE_RESERVATION:
            return await services.warehouse.release(plan.call, plan.reservation_key)
        case StepKind.CHARGE:
            return await services.payments.charge(plan.call, plan.amount_minor, plan.currency)
        case StepKind.RECONCILE_PAYMENT:
            return await services.payments.charge_status(plan.call, plan.charge_key)
        case StepKind.REFUND:
            return await services.payments.refund(
                plan.call, plan.payment_reference, plan.amount_minor
            )
        case StepKind.SHIP:
            return await services.shipping.ship(plan.call, plan.items)
        case StepKind.EXPIRE_RESERVATION:
            raise ValueError("the expiry timer calls no service")
