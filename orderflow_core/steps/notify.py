"""The notify_customer step (process version 2): tell the customer the order has shipped.

It runs after the order reached `shipped` and changes no state: a success is recorded on the
step (and announced as `customer.notified`); an exhausted or blocked notification stops the step,
which puts the order on the attention list (`notification_failed`) for an operator to retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from orderflow_core.attempts import call_for, retry_or_stop, stop, succeed
from orderflow_core.draft import Draft
from orderflow_core.model import OrderAggregate, Step
from orderflow_core.outcomes import Broken, Outcome, Refused, Succeeded
from orderflow_core.ports import Services
from orderflow_core.states import AttentionReason, StepKind, StepStatus
from orderflow_core.steps.definition import (
    OPERATOR,
    CallPlan,
    Operation,
    Retry,
    StepDefinition,
    is_text,
    request_of,
)
from orderflow_core.vocabulary import Event

TEMPLATE = "shipped"


@attrs.frozen
class NotifyRequest:
    template: str


def start(d: Draft, step: Step) -> CallPlan | None:
    return CallPlan(StepKind.NOTIFY_CUSTOMER, call_for(d, step), NotifyRequest(TEMPLATE))


async def perform(services: Services, plan: CallPlan) -> Outcome:
    if services.notifications is None:
        return Broken("no notification service is configured")
    template = request_of(plan, NotifyRequest).template
    return await services.notifications.notify(plan.call, template)


def _well_formed(body: Mapping[str, Any]) -> bool:
    return is_text(body.get("message_id"))


def on_result(d: Draft, step: Step, outcome: Outcome) -> None:
    if isinstance(outcome, Succeeded):
        succeed(d, step, outcome.result)
        message = str(outcome.result.get("message_id", ""))
        d.emit(Event.CUSTOMER_NOTIFIED, {"template": TEMPLATE, "message_id": message})
    elif isinstance(outcome, Refused):
        stop(d, step, StepStatus.FAILED, outcome.code)
    else:
        retry_or_stop(d, step, outcome)


def attention(aggregate: OrderAggregate, step: Step) -> AttentionReason | None:
    del aggregate
    return AttentionReason.NOTIFICATION_FAILED if step.is_stopped else None


DEFINITION = StepDefinition(
    kind=StepKind.NOTIFY_CUSTOMER,
    start=start,
    on_result=on_result,
    perform=perform,
    operation=Operation(
        "notify", "notifications", frozenset({(422, "undeliverable_address")}), _well_formed
    ),
    # It runs after the order ended (shipped); a stop of it still waits for an operator.
    mainline=False,
    outlives_order=True,
    attention=attention,
    retry=Retry(OPERATOR, "only an operator may retry the notification"),
)
