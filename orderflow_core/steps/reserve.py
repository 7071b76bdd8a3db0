"""The reserve step: hold the order's stock at the warehouse."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from orderflow_core.attempts import call_for, retry_or_stop, seconds, stop, succeed
from orderflow_core.draft import Draft
from orderflow_core.model import Item, Step
from orderflow_core.outcomes import Outcome, Refused, Succeeded
from orderflow_core.ports import Services
from orderflow_core.states import OrderState, ReservationStatus, StepKind, StepStatus
from orderflow_core.steps.definition import (
    CallPlan,
    Cancel,
    Operation,
    StepDefinition,
    is_text,
    request_of,
)


@attrs.frozen
class ReserveRequest:
    items: tuple[Item, ...]


def start(d: Draft, step: Step) -> CallPlan | None:
    if d.order.state is OrderState.CREATED:
        d.move(OrderState.RESERVING, "reserve step started")
    return CallPlan(StepKind.RESERVE, call_for(d, step), ReserveRequest(d.order.items))


async def perform(services: Services, plan: CallPlan) -> Outcome:
    return await services.warehouse.reserve(plan.call, request_of(plan, ReserveRequest).items)


def _well_formed(body: Mapping[str, Any]) -> bool:
    return is_text(body.get("reservation_id")) and body.get("status") == "held"


def on_result(d: Draft, step: Step, outcome: Outcome) -> None:
    if isinstance(outcome, Succeeded):
        succeed(d, step, outcome.result)
        ttl = d.ctx.timing.reservation_ttl_s
        d.set_order(
            reservation_id=str(outcome.result.get("reservation_id", "")) or None,
            reservation_status=ReservationStatus.HELD,
            reserved_at=d.now,
            reservation_expires_at=d.now + seconds(ttl),
        )
        d.move(OrderState.RESERVED, "warehouse confirmed")
        d.advance(StepKind.RESERVE)
        d.new_step(StepKind.EXPIRE_RESERVATION, delay_s=ttl)
    elif isinstance(outcome, Refused):
        stop(d, step, StepStatus.FAILED, outcome.code)
        d.move(OrderState.RESERVATION_FAILED, outcome.code)
    else:
        retry_or_stop(d, step, outcome)


DEFINITION = StepDefinition(
    kind=StepKind.RESERVE,
    start=start,
    on_result=on_result,
    perform=perform,
    # `reservation_key_released`: a release arrived before the reservation (a tombstone).
    operation=Operation(
        "reserve",
        "warehouse",
        frozenset({(409, "out_of_stock"), (409, "reservation_key_released")}),
        _well_formed,
    ),
    # Before it started nothing is held (cancelled at once); once it stopped, the stock it may
    # have held is released first.
    cancel=Cancel(due_in=OrderState.CREATED, stopped_in=OrderState.RESERVING),
)
