"""One catalogue of the names the core writes: outbox event types and audit actions.

Events go to the feed, the webhook and NATS (`GET /api/v1/events`); audit actions to the order's
audit log. Every `Draft.emit` and `Draft.note` takes its name from here, and a test checks that a
run of every scenario writes no other name.
"""

from __future__ import annotations

import enum

from orderflow_core.states import OrderState, RefundStatus, StepStatus


class Event(enum.StrEnum):
    """Event types besides the state changes (`order.<state>`, see `state_event`)."""

    NEEDS_ATTENTION = "order.needs_attention"
    RESERVATION_RELEASED = "reservation.released"
    CUSTOMER_NOTIFIED = "customer.notified"  # process version 2


class Audit(enum.StrEnum):
    """Audit actions besides a stopped step (`step.<status>`, see `step_audit`)."""

    ORDER_CREATED = "order.created"
    ORDER_CANCEL = "order.cancel"
    RELEASE_RESERVATION = "compensation.release_reservation"
    REFUND = "compensation.refund"
    RESERVATION_EXPIRED = "reservation.expired"
    MANUAL_RETRY = "manual.retry"
    MANUAL_RECONCILE = "manual.reconcile"
    MANUAL_REFUND = "manual.refund"
    REJECTED = "step.result_rejected"  # a result not stored (stale, lease expired)


def state_event(state: OrderState) -> str:
    """The event of a transition into `state`."""
    return f"order.{state.value}"


def refund_event(status: RefundStatus) -> str:
    """The event of a refund reaching `status`."""
    return f"refund.{status.value}"


def step_audit(status: StepStatus) -> str:
    """The audit action of a step that stopped or was cancelled with `status`."""
    return f"step.{status.value}"


EVENT_TYPES: frozenset[str] = frozenset(
    {*Event, *(state_event(s) for s in OrderState), *(refund_event(s) for s in RefundStatus)}
)
AUDIT_ACTIONS: frozenset[str] = frozenset({*Audit, *(step_audit(s) for s in StepStatus)})
