"""The ship step: hand the parcel to the carrier."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from orderflow_core.attempts import call_for, retry_or_stop, stop, succeed
from orderflow_core.attention import stopped as stopped_attention
from orderflow_core.draft import Draft
from orderflow_core.model import Item, OrderAggregate, Step
from orderflow_core.outcomes import Outcome, Refused, Succeeded
from orderflow_core.ports import Services
from orderflow_core.states import AttentionReason, OrderState, StepKind, StepStatus
from orderflow_core.steps.definition import (
    OPERATOR,
    CallPlan,
    Operation,
    Retry,
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
        d.advance(StepKind.SHIP)
    elif isinstance(outcome, Refused):
        stop(d, step, StepStatus.FAILED, outcome.code)
        d.move(OrderState.SHIPPING_FAILED, outcome.code)
    elif retry_or_stop(d, step, outcome) is StepStatus.FAILED:
        d.move(OrderState.SHIPPING_FAILED, "shipping retries exhausted")


def attention(aggregate: OrderAggregate, step: Step) -> AttentionReason | None:
    """Paid but not shipped (refused, or retries exhausted): a person decides."""
    if aggregate.order.state is OrderState.SHIPPING_FAILED:
        return AttentionReason.SHIPPING_FAILED
    return stopped_attention(aggregate, step)


def rearm(d: Draft, step: Step) -> None:
    del step
    if d.order.state is OrderState.SHIPPING_FAILED:
        d.move(OrderState.SHIPPING, "operator retries shipping")


DEFINITION = StepDefinition(
    kind=StepKind.SHIP,
    start=start,
    on_result=on_result,
    perform=perform,
    operation=Operation("ship", "shipping", frozenset({(422, "undeliverable")}), _well_formed),
    attention=attention,
    # Money was taken: only an operator sends the parcel again (or refunds instead).
    retry=Retry(OPERATOR, "only an operator may retry shipping", rearm=rearm),
)
