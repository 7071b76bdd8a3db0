"""The JSON representations of the REST API: orders, steps, refunds, audit entries, events.

Why here and not on the model: the core's values stay free of any wire format; this module is
the one place that decides field names, UTC timestamps and integer amounts on the wire.
"""

from __future__ import annotations

import enum
import json
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from orderflow_core.model import (
    Attempt,
    AuditEntry,
    HistoryEntry,
    Item,
    Order,
    OrderAggregate,
    OutboxEvent,
    Refund,
    Step,
)
from orderflow_core.service import OrderView
from orderflow_core.states import StepKind
from orderflow_core.steps.registry import current_step

Json = dict[str, Any]


def _default(value: object) -> object:
    if isinstance(value, datetime):
        return timestamp(value)
    if isinstance(value, UUID | enum.Enum):
        return str(value.value if isinstance(value, enum.Enum) else value)
    if isinstance(value, tuple | frozenset | set):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dumps(value: object) -> str:
    """JSON text for a response; UUIDs, enums and times inside free-form payloads included."""
    return json.dumps(value, default=_default, ensure_ascii=False, allow_nan=False)


def timestamp(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a `Z`, or None."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def item(line: Item) -> Json:
    """One order line."""
    return {"sku": line.sku, "quantity": line.quantity, "unit_price_minor": line.unit_price_minor}


def attempt(one: Attempt) -> Json:
    """One attempt of a step: when it started and finished, how it ended, who ran it."""
    return {
        "attempt": one.attempt,
        "started_at": timestamp(one.started_at),
        "finished_at": timestamp(one.finished_at),
        "outcome": one.outcome,
        "error": one.error,
        "worker": one.worker,
    }


def step(one: Step) -> Json:
    """A step with its attempts, with the fields docs/rest-api.md lists."""
    return {
        "step_id": str(one.step_id),
        "kind": one.kind.value,
        "status": one.status.value,
        "attempt": one.attempt,
        "max_attempts": one.max_attempts,
        "idempotency_key": one.idempotency_key,
        "next_attempt_at": timestamp(one.next_attempt_at),
        "lease_expires_at": timestamp(one.lease_expires_at),
        "last_error": one.last_error,
        "attempts": [attempt(a) for a in one.attempts],
    }


def history(entry: HistoryEntry) -> Json:
    """One transition: from, to, at, actor, reason."""
    return {
        "from": entry.from_state.value if entry.from_state is not None else None,
        "to": entry.to_state.value,
        "at": timestamp(entry.at),
        "actor": entry.actor,
        "reason": entry.reason,
    }


def refund(one: Refund) -> Json:
    """A refund: its own operation with its own status."""
    return {
        "refund_id": str(one.refund_id),
        "order_id": str(one.order_id),
        "amount_minor": one.amount_minor,
        "reason": one.reason,
        "status": one.status.value,
        "requested_by": one.requested_by,
        "step_id": str(one.step_id),
        "refund_reference": one.refund_reference,
        "last_error": one.last_error,
        "created_at": timestamp(one.created_at),
        "updated_at": timestamp(one.updated_at),
    }


def order_summary(order: Order) -> Json:
    """An order as the list shows it: no steps, history or refunds."""
    return {
        "order_id": str(order.order_id),
        "customer_id": order.customer_id,
        "state": order.state.value,
        "state_reason": order.state_reason,
        "process_version": order.process_version,
        "items": [item(i) for i in order.items],
        "total_minor": order.total_minor,
        "currency": order.currency,
        "created_at": timestamp(order.created_at),
        "updated_at": timestamp(order.updated_at),
        "needs_attention": order.attention_reason is not None,
        "attention_reason": order.attention_reason,
        "attention_since": timestamp(order.attention_since),
    }


def _reservation(order: Order) -> Json:
    return {
        "status": order.reservation_status,
        "reservation_id": order.reservation_id,
        "reserved_at": timestamp(order.reserved_at),
        "expires_at": timestamp(order.reservation_expires_at),
        "expired": order.reservation_expired,
    }


def _payment(aggregate: OrderAggregate) -> Json:
    charge = aggregate.latest(StepKind.CHARGE)
    return {
        "status": aggregate.order.payment_status,
        "reference": aggregate.order.payment_reference,
        "idempotency_key": charge.idempotency_key if charge is not None else None,
        "amount_minor": aggregate.order.total_minor,
        "currency": aggregate.order.currency,
    }


def order(view: OrderView) -> Json:
    """The full order: state, the actions its reader may ask for now, history, current step,
    steps, reservation, payment, refunds."""
    aggregate = view.aggregate
    current = current_step(aggregate)
    return {
        **order_summary(aggregate.order),
        "allowed_actions": list(view.allowed_actions),
        "history": [history(h) for h in view.history],
        "current_step": step(current) if current is not None else None,
        "steps": [step(s) for s in aggregate.steps],
        "reservation": _reservation(aggregate.order),
        "payment": _payment(aggregate),
        "refunds": [refund(r) for r in aggregate.refunds],
    }


def order_page(orders: list[Order], next_cursor: str | None) -> Json:
    """A page of the list, newest first, with the cursor of the next page."""
    return {"orders": [order_summary(o) for o in orders], "next_cursor": next_cursor}


def audit_entry(entry: AuditEntry) -> Json:
    """Who did what to which step, when, with what outcome."""
    return {
        "order_id": str(entry.order_id),
        "at": timestamp(entry.at),
        "actor": entry.actor,
        "action": entry.action,
        "outcome": entry.outcome,
        "step_id": str(entry.step_id) if entry.step_id is not None else None,
        "details": entry.details,
    }


def event(one: OutboxEvent) -> Json:
    """One outbox event; consumers de-duplicate by `event_id`."""
    return {
        "seq": one.seq,
        "event_id": str(one.event_id),
        "type": one.type,
        "order_id": str(one.order_id),
        "payload": one.payload,
        "created_at": timestamp(one.created_at),
    }


def event_page(events: list[OutboxEvent], after: int) -> Json:
    """A page of the feed; `next_after` is where the next poll starts (unchanged when empty)."""
    next_after = events[-1].seq if events else after
    return {"events": [event(e) for e in events], "next_after": next_after}
