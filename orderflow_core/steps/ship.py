"""The ship step: hand the parcel to the carrier."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from orderflow_core.attempts import call_for, retry_or_stop, stop, succeed
from orderflow_core.draft import Draft
from orderflow_core.model import Item, Step
from orderflow_core.outcomes import Outcome, Refused, Succeeded
from orderflow_core.ports import Services
from orderflow_core.states import OrderState, StepKind, StepStatus
from orderflow_core.steps.definition import (
    CallPlan,
    Operation,
    StepDefinition,
    is_text,
    request_of,
)


@attrs.frozen
class ShipRequest:
    items: tuple[Item, ...]


def start(d: Draft, step: Step) -> CallPlan | None:
    if d.order.state is OrderState.PAID:
        d.move(OrderState.SHIPPING, "ship step started")
    return CallPlan(StepKind.SHIP, call_for(d, step), ShipRequest(d.order.items))


async def perform(services: Services, plan: CallPlan) -> Outcome:
    return await services.shipping.ship(plan.call, request_of(plan, ShipRequest).items)


def _well_formed(body: Mapping[str, Any]) -> bool:
    return is_text(body.get("shipment_id"))


def on_result(d: Draft, step: Step, outcome: Outcome) -> None:
    if isinstance(outcome, Succeeded):
        succeed(d, step, outcome.result)
        d.move(OrderState.SHIPPED, "carrier confirmed")
    elif isinstance(outcome, Refused):
        stop(d, step, StepStatus.FAILED, outcome.code)
        d.move(OrderState.SHIPPING_FAILED, outcome.code)
    elif retry_or_stop(d, step, outcome) is StepStatus.FAILED:
        d.move(OrderState.SHIPPING_FAILED, "shipping retries exhausted")


DEFINITION = StepDefinition(
    kind=StepKind.SHIP,
    start=start,
    on_result=on_result,
    perform=perform,
    operation=Operation("ship", "shipping", frozenset({(422, "undeliverable")}), _well_formed),
)
