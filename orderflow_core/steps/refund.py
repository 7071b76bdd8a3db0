"""The refund step: give money back (its own operation, with its own record: a `Refund`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import UUID

import attrs

from orderflow_core.attempts import call_for, retry_or_stop, stop, succeed
from orderflow_core.draft import Draft
from orderflow_core.model import Step
from orderflow_core.outcomes import Outcome, Refused, Succeeded, Transient, UnknownOutcome
from orderflow_core.ports import Services
from orderflow_core.states import OrderState, RefundStatus, StepKind, StepStatus
from orderflow_core.steps import payment
from orderflow_core.steps.definition import (
    CallPlan,
    Operation,
    StepDefinition,
    is_text,
    request_of,
)
from orderflow_core.vocabulary import Audit, refund_event


@attrs.frozen
class RefundRequest:
    payment_reference: str
    amount_minor: int


def start(d: Draft, step: Step) -> CallPlan | None:
    assert step.refund_id is not None
    refund = d.put_refund(
        attrs.evolve(d.refund(step.refund_id), status=RefundStatus.PROCESSING, updated_at=d.now)
    )
    request = RefundRequest(d.order.payment_reference or "", refund.amount_minor)
    return CallPlan(StepKind.REFUND, call_for(d, step), request)


async def perform(services: Services, plan: CallPlan) -> Outcome:
    request = request_of(plan, RefundRequest)
    return await services.payments.refund(
        plan.call, request.payment_reference, request.amount_minor
    )


def _well_formed(body: Mapping[str, Any]) -> bool:
    return is_text(body.get("refund_reference"))


def on_result(d: Draft, step: Step, outcome: Outcome) -> None:
    assert step.refund_id is not None
    refund = d.refund(step.refund_id)
    if isinstance(outcome, Succeeded):
        succeed(d, step, outcome.result)
        ref = str(outcome.result.get("refund_reference", "")) or None
        _set_refund(d, refund.refund_id, RefundStatus.SUCCEEDED, refund_reference=ref)
        refunded = sum(r.amount_minor for r in d.refunds if r.status is RefundStatus.SUCCEEDED)
        if d.order.state is OrderState.SHIPPING_FAILED and refunded >= d.order.total_minor:
            d.move(OrderState.REFUNDED, "full refund succeeded")
            payment.release_after_refund(d)
        return
    if isinstance(outcome, Refused):
        stop(d, step, StepStatus.FAILED, outcome.code)
        _set_refund(d, refund.refund_id, RefundStatus.FAILED, last_error=outcome.code)
        return
    # A refund repeated under its key is de-duplicated by the provider: unknown is retried.
    retryable = Transient(outcome.detail) if isinstance(outcome, UnknownOutcome) else outcome
    status = retry_or_stop(d, step, retryable)
    if status is StepStatus.FAILED:
        _set_refund(
            d, refund.refund_id, RefundStatus.FAILED, last_error=d.step(step.step_id).last_error
        )
    elif status is StepStatus.BLOCKED:
        _set_refund(
            d, refund.refund_id, RefundStatus.BLOCKED, last_error=d.step(step.step_id).last_error
        )


def _set_refund(
    d: Draft,
    refund_id: UUID,
    status: RefundStatus,
    *,
    refund_reference: str | None = None,
    last_error: str | None = None,
) -> None:
    refund = d.refund(refund_id)
    refund = d.put_refund(
        attrs.evolve(
            refund,
            status=status,
            updated_at=d.now,
            refund_reference=refund_reference or refund.refund_reference,
            last_error=last_error,
        )
    )
    d.emit(
        refund_event(status),
        {"refund_id": str(refund.refund_id), "amount_minor": refund.amount_minor},
    )
    d.note(
        Audit.REFUND,
        status.value,
        refund.step_id,
        refund_id=str(refund.refund_id),
        amount_minor=refund.amount_minor,
    )


DEFINITION = StepDefinition(
    kind=StepKind.REFUND,
    start=start,
    on_result=on_result,
    perform=perform,
    operation=Operation("refund", "payments", frozenset({(409, "refund_rejected")}), _well_formed),
    # A refund is its own operation beside the order's sequence; its state is the refund's.
    mainline=False,
)
