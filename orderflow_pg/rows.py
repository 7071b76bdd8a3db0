"""Row <-> model mapping: columns are named after the model's fields, one to one."""

from __future__ import annotations

import typing
from datetime import datetime
from typing import Any
from uuid import UUID

import attrs

from orderflow_core import ids
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


_FIELDS: dict[tuple[type[Any], tuple[str, ...]], tuple[str, ...]] = {}
_TYPED: dict[type[Any], tuple[tuple[str, str], ...]] = {}


def _fields(cls: type[Any], *, without: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The attrs field names of `cls` but `without`, computed once per class."""
    key = (cls, without)
    if key not in _FIELDS:
        _FIELDS[key] = tuple(f.name for f in attrs.fields(cls) if f.name not in without)
    return _FIELDS[key]


def _typed_fields(cls: type[Any]) -> tuple[tuple[str, str], ...]:
    """(field, "uuid" | "instant") for the fields a jsonb row carries as strings."""
    if cls not in _TYPED:
        typed = []
        for name, hint in typing.get_type_hints(cls).items():
            kinds = {hint, *typing.get_args(hint)}
            if UUID in kinds:
                typed.append((name, "uuid"))
            elif datetime in kinds:
                typed.append((name, "instant"))
        _TYPED[cls] = tuple(typed)
    return _TYPED[cls]


def json_row(cls: type[Any], data: Row) -> Row:
    """A row read as jsonb (`to_jsonb`), with ids and instants as Python values again."""
    row = dict(data)
    for name, kind in _typed_fields(cls):
        value = row.get(name)
        if value is not None:
            row[name] = UUID(value) if kind == "uuid" else datetime.fromisoformat(value)
    return row


def _doc(value: Any, *, without: tuple[str, ...] = ()) -> Params:
    """Every attrs field by name, for a jsonb document (`writes._json_value` encodes the rest;
    the enums are `StrEnum`s, which `json` writes as their values)."""
    return {name: getattr(value, name) for name in _fields(type(value), without=without)}


def order_doc(order: Order) -> Params:
    """An order in `apply_changes`'s document."""
    return _doc(order)


def step_doc(step: Step) -> Params:
    """A step in `apply_changes`'s document: its latest attempt, under way or ended, goes on its
    row (`latest_*`); the attempts before it are entries of their own (`attempt_doc`). Its
    idempotency key is left out (NULL) when it is the one derived from the order, kind and
    number (`ids.step_key`), as every step's is: ~50 bytes fewer in each of the row's versions,
    so in the WAL of its insert and of each update."""
    doc = _doc(step, without=("attempts",))
    if step.idempotency_key == ids.step_key(step.order_id, step.kind.value, step.seq):
        doc["idempotency_key"] = None  # derived again when read (`step_from_row`)
    latest = latest_attempt(step)
    doc["latest_attempt"] = latest.attempt if latest is not None else None
    doc["latest_started_at"] = latest.started_at if latest is not None else None
    doc["latest_worker"] = latest.worker if latest is not None else None
    doc["latest_finished_at"] = latest.finished_at if latest is not None else None
    doc["latest_outcome"] = latest.outcome if latest is not None else None
    doc["latest_error"] = latest.error if latest is not None else None
    return doc


def latest_attempt(step: Step) -> Attempt | None:
    """The step's attempt with the highest number, which its row keeps; every earlier one must
    have ended (starting an attempt closes any earlier one that never reported), else the step
    is refused."""
    if not step.attempts:
        return None
    latest = max(step.attempts, key=lambda a: a.attempt)
    running = [a for a in step.attempts if a.outcome is None and a is not latest]
    if running:
        under_way = len(running) + (latest.outcome is None)
        raise ValueError(f"step {step.step_id} has {under_way} attempts under way")
    return latest


def attempt_doc(order_id: UUID, step_id: UUID, attempt: Attempt) -> Params:
    """An earlier attempt in `apply_changes`'s document (a `finished_attempts` row, which
    carries its step's order: its key starts with it)."""
    if attempt.outcome is None:
        raise ValueError(f"attempt {attempt.attempt} of step {step_id} has not ended")
    return {"order_id": order_id, "step_id": step_id, **_doc(attempt)}


def refund_doc(refund: Refund) -> Params:
    """A refund in `apply_changes`'s document."""
    return _doc(refund)


def event_doc(event: OutboxEvent) -> Params:
    """An outbox event in `apply_changes`'s document; the store assigns `seq`. The payload's
    `order_id`, when it is the row's own (as in every event the core emits), is left out (~50
    bytes of each event row) and marked so (`order_id_left_out`); the queries that read events
    (`events`, `unpublished_events`) put it back."""
    doc = _doc(event, without=("seq",))
    left_out = event.payload.get("order_id") == str(event.order_id)
    if left_out:
        doc["payload"] = {k: v for k, v in event.payload.items() if k != "order_id"}
    doc["order_id_left_out"] = left_out
    return doc


def audit_doc(entry: AuditEntry) -> Params:
    """An audit entry in `apply_changes`'s document."""
    return _doc(entry)


def idempotency_doc(record: ApiIdempotency) -> Params:
    """An idempotency record in `apply_changes`'s document, with its placement (the key's
    first column, `ids.idempotency_placement`)."""
    placement = ids.idempotency_placement(record.user_id, record.scope, record.key)
    return {"placement": placement, **_doc(record)}


def _pick(cls: type[Any], row: Row, *, without: tuple[str, ...] = ()) -> Params:
    return {name: row[name] for name in _fields(cls, without=without)}


def order_from_row(row: Row) -> Order:
    """An `orders` row as the core's value."""
    fields = _pick(Order, row)
    fields["state"] = OrderState(row["state"])
    fields["items"] = tuple(Item(**item) for item in row["items"])
    return Order(**fields)


def step_from_row(row: Row, earlier: tuple[Attempt, ...]) -> Step:
    """A `workflow_steps` row, with its earlier attempts, as the core's value; the latest
    attempt, on the row, comes after them."""
    fields = _pick(Step, row, without=("attempts",))
    fields["kind"] = StepKind(row["kind"])
    fields["status"] = StepStatus(row["status"])
    if fields["idempotency_key"] is None:  # the usual key, not stored (`step_doc`)
        fields["idempotency_key"] = ids.step_key(row["order_id"], row["kind"], row["seq"])
    attempts = earlier
    if row["latest_attempt"] is not None:
        latest = Attempt(
            attempt=row["latest_attempt"],
            started_at=row["latest_started_at"],
            worker=row["latest_worker"],
            finished_at=row["latest_finished_at"],
            outcome=row["latest_outcome"],
            error=row["latest_error"],
        )
        attempts = tuple(sorted((*earlier, latest), key=lambda a: a.attempt))
    return Step(**fields, attempts=attempts)


def attempt_from_row(row: Row) -> Attempt:
    """A `finished_attempts` row as the core's value."""
    return Attempt(**_pick(Attempt, row))


def refund_from_row(row: Row) -> Refund:
    """A `refunds` row as the core's value."""
    fields = _pick(Refund, row)
    fields["status"] = RefundStatus(row["status"])
    return Refund(**fields)


def history_from_row(row: Row) -> HistoryEntry:
    """A row of the view `order_history` (an order's state-change events) as the core's
    value."""
    fields = _pick(HistoryEntry, row)
    fields["from_state"] = OrderState(row["from_state"]) if row["from_state"] else None
    fields["to_state"] = OrderState(row["to_state"])
    return HistoryEntry(**fields)


def audit_from_row(row: Row) -> AuditEntry:
    """An `audit_log` row as the core's value."""
    return AuditEntry(**_pick(AuditEntry, row))


def event_from_row(row: Row) -> OutboxEvent:
    """An `outbox` row as the core's value."""
    return OutboxEvent(**_pick(OutboxEvent, row))


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
