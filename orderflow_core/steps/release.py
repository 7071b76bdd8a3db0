"""The release step (a compensation): give the held stock back, under the reserve call's key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from orderflow_core.attempts import call_for, retry_or_stop, succeed
from orderflow_core.draft import Draft
from orderflow_core.model import Step
from orderflow_core.outcomes import Broken, Outcome, Refused, Succeeded
from orderflow_core.ports import Services
from orderflow_core.states import OrderState, StepKind
from orderflow_core.steps.definition import CallPlan, Operation, StepDefinition, request_of
from orderflow_core.vocabulary import Audit, Event


@attrs.frozen
class ReleaseRequest:
    reservation_key: str


def start(d: Draft, step: Step) -> CallPlan | None:
    reserve = d.latest(StepKind.RESERVE)
    key = reserve.idempotency_key if reserve else ""
    return CallPlan(StepKind.RELEASE_RESERVATION, call_for(d, step), ReleaseRequest(key))


async def perform(services: Services, plan: CallPlan) -> Outcome:
    request = request_of(plan, ReleaseRequest)
    return await services.warehouse.release(plan.call, request.reservation_key)


def _well_formed(body: Mapping[str, Any]) -> bool:
    return body.get("status") in ("released", "nothing_to_release")


def on_result(d: Draft, step: Step, outcome: Outcome) -> None:
    if not isinstance(outcome, Succeeded):
        retry_or_stop(d, step, Broken(outcome.code) if isinstance(outcome, Refused) else outcome)
        return
    succeed(d, step, outcome.result)
    status = str(outcome.result.get("status", "released"))
    d.set_order(reservation_status=status)
    d.emit(Event.RESERVATION_RELEASED, {"status": status, "step_id": str(step.step_id)})
    d.note(Audit.RELEASE_RESERVATION, status, step.step_id)
    if d.order.state is OrderState.CANCELLING:
        d.move(OrderState.CANCELLED, "reservation released after cancel")
    elif d.order.state is OrderState.RELEASING:
        d.move(OrderState.PAYMENT_FAILED, d.order.state_reason or "reservation released")


DEFINITION = StepDefinition(
    kind=StepKind.RELEASE_RESERVATION,
    start=start,
    on_result=on_result,
    perform=perform,
    operation=Operation("release", "warehouse", frozenset(), _well_formed),
)
