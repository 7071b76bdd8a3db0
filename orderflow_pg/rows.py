"""Row <-> model mapping: columns are named after the model's fields, one to one."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import attrs
from psycopg.types.json import Jsonb

from orderflow_core.model import (
    ApiIdempotency,
    Attempt,
    AuditEntry,
    Claim,
    HistoryEntry,
    Item,
    Order,
    OutboxEvent,
    Refund,
    Step,
)
from orderflow_core.states import OrderState, RefundStatus, StepKind, StepStatus

Row = dict[str, Any]
Params = dict[str, Any]


def _fields(cls: type[Any], *, without: tuple[str, ...] = ()) -> Params:
    return {f.name: None for f in attrs.fields(cls) if f.name not in without}


def _params(value: Any, *, without: tuple[str, ...] = ()) -> Params:
    """Every attrs field as a bound parameter; enums by value, dicts as jsonb."""
    params: Params = {}
    for name in _fields(type(value), without=without):
        field = getattr(value, name)
        if isinstance(field, OrderState | StepKind | StepStatus | RefundStatus):
            field = field.value
        elif isinstance(field, dict):
            field = Jsonb(field)
        params[name] = field
    return params


def _pick(cls: type[Any], row: Row, *, without: tuple[str, ...] = ()) -> Params:
    return {name: row[name] for name in _fields(cls, without=without)}


def order_params(order: Order) -> Params:
    """The bound parameters of `insert_order` / `update_order`."""
    params = _params(order)
    params["items"] = Jsonb([attrs.asdict(item) for item in order.items])
    return params


def order_from_row(row: Row) -> Order:
    """An `orders` row as the core's value."""
    fields = _pick(Order, row)
    fields["state"] = OrderState(row["state"])
    fields["items"] = tuple(Item(**item) for item in row["items"])
    return Order(**fields)


def step_params(step: Step) -> Params:
    """The bound parameters of `upsert_step` (attempts are rows of their own)."""
    return _params(step, without=("attempts",))


def step_from_row(row: Row, attempts: tuple[Attempt, ...]) -> Step:
    """A `workflow_steps` row, with its attempts, as the core's value."""
    fields = _pick(Step, row, without=("attempts",))
    fields["kind"] = StepKind(row["kind"])
    fields["status"] = StepStatus(row["status"])
    return Step(**fields, attempts=attempts)


def attempt_params(step_id: UUID, attempt: Attempt) -> Params:
    """The bound parameters of `upsert_attempt`."""
    return {"step_id": step_id, **_params(attempt)}


def attempt_from_row(row: Row) -> Attempt:
    """A `step_attempts` row as the core's value."""
    return Attempt(**_pick(Attempt, row))


def refund_params(refund: Refund) -> Params:
    """The bound parameters of `upsert_refund`."""
    return _params(refund)


def refund_from_row(row: Row) -> Refund:
    """A `refunds` row as the core's value."""
    fields = _pick(Refund, row)
    fields["status"] = RefundStatus(row["status"])
    return Refund(**fields)


def history_params(entry: HistoryEntry) -> Params:
    """The bound parameters of `insert_history`."""
    params = _params(entry)
    params["from_state"] = entry.from_state.value if entry.from_state else None
    return params


def history_from_row(row: Row) -> HistoryEntry:
    """An `order_history` row as the core's value."""
    fields = _pick(HistoryEntry, row)
    fields["from_state"] = OrderState(row["from_state"]) if row["from_state"] else None
    fields["to_state"] = OrderState(row["to_state"])
    return HistoryEntry(**fields)


def audit_params(entry: AuditEntry) -> Params:
    """The bound parameters of `insert_audit`."""
    return _params(entry)


def audit_from_row(row: Row) -> AuditEntry:
    """An `audit_log` row as the core's value."""
    return AuditEntry(**_pick(AuditEntry, row))


def event_params(event: OutboxEvent) -> Params:
    """The bound parameters of `insert_event`; the store assigns `seq`."""
    return _params(event, without=("seq",))


def event_from_row(row: Row) -> OutboxEvent:
    """An `outbox` row as the core's value."""
    return OutboxEvent(**_pick(OutboxEvent, row))


def idempotency_params(record: ApiIdempotency) -> Params:
    """The bound parameters of `insert_idempotency`."""
    return _params(record)


def idempotency_from_row(row: Row) -> ApiIdempotency:
    """An `api_idempotency` row as the core's value."""
    return ApiIdempotency(**_pick(ApiIdempotency, row))


def claim_from_row(row: Row) -> Claim:
    """A row returned by `claim_due` as the lease the executor now holds."""
    return Claim(
        step_id=row["step_id"],
        order_id=row["order_id"],
        kind=StepKind(row["kind"]),
        attempt=row["attempt"],
        owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
    )
