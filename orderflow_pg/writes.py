"""Applying a decided `Change` inside an open transaction: every part or nothing (rule 4).

A change goes to PostgreSQL as one statement (`apply_changes`) carrying one jsonb document:
the order, steps, attempts, refunds, events, audit, idempotency record and processed-event
mark, each under its own key. History is not written apart: an order's transitions are its
state-change events, each numbered within its order and marked (`_event_docs`). One
statement instead of one per row keeps the client's work per transition small: psycopg's
cost is per statement, and on this path it was the largest cost of a step. A group commit
sends the documents of many orders in the same statement, each fenced by its own guard.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import attrs
import orjson
from psycopg.pq import TransactionStatus

from orderflow_core import ids
from orderflow_core.model import (
    Attempt,
    Change,
    HistoryEntry,
    OrderAggregate,
    OutboxEvent,
    Step,
)
from orderflow_core.states import StepStatus
from orderflow_core.vocabulary import state_event
from orderflow_pg import rows
from orderflow_pg.queries import Connection, query


async def insert_new_order(conn: Connection, change: Change, *, one_order: bool = False) -> None:
    """Write a new order with everything that comes with it."""
    if change.order is None:
        raise ValueError("create needs an order")
    await apply_documents(conn, [change_doc(change, new=True)], one_order=one_order)


async def apply_documents(
    conn: Connection, docs: list[dict[str, Any]], *, one_order: bool = False
) -> list[bool]:
    """Send several orders' documents (`change_doc`, no two of one order) in one statement;
    whether each was applied (False: its guarded step was fenced off, nothing of it written).
    With `one_order` (on Citus) each document is written by its own call of
    `orderflow_apply_order` on the node of its order's shard (`_apply_on_shard`)."""
    if not docs:
        return []
    if one_order:
        return [await _apply_on_shard(conn, doc) for doc in docs]
    cursor = conn.cursor()
    await cursor.execute(query("apply_changes"), {"docs": documents(docs)})
    return [bool(row[1]) for row in await cursor.fetchall()]


async def _apply_on_shard(conn: Connection, doc: dict[str, Any]) -> bool:
    """On Citus: one order's document written by `orderflow_apply_order` (citus.sql), which
    Citus runs on the node of the order's shard, so the transaction commits there alone,
    without two-phase commit. Its events are numbered first on the coordinator
    (`number_events`, in the same transaction: the feed's horizon, `feed_horizon`, waits for
    it), which also wakes the executors if the write makes a step due now. An idempotency
    record kept on another shard (a create whose id was not taken from its key) is written
    after it, in its transaction (then a two-phase commit). Outside a transaction (a create)
    the statements get one of their own."""
    order_id = doc_order(doc)
    record = doc.get("idempotency")
    apart = record is not None and str(record["placement"]) != str(order_id)
    numbering = bool(doc.get("events")) or bool(doc.get("announce"))
    if (numbering or apart) and conn.info.transaction_status == TransactionStatus.IDLE:
        async with conn.transaction():
            return await _apply_on_shard(conn, doc)
    if apart:
        doc = {k: v for k, v in doc.items() if k != "idempotency"}
    if numbering:
        cursor = conn.cursor()
        counts = {"events": len(doc.get("events", ())), "announce": bool(doc.get("announce"))}
        await cursor.execute(query("number_events"), counts)
        found = await cursor.fetchone()
        assert found is not None
        numbered = zip(doc.get("events", []), found[2], strict=True)
        doc = {**doc, "events": [{**e, "seq": s} for e, s in numbered]}
    cursor = conn.cursor()
    params = {"order_id": order_id, "doc": _json(doc)}
    await cursor.execute(query("apply_order"), params)
    row = await cursor.fetchone()
    applied = bool(row and row[0])
    if applied and apart:
        await cursor.execute(query("insert_idempotency"), {"record": _json(record)})
    return applied


def _json(value: object) -> str:
    return orjson.dumps(value, default=_json_value).decode()


def doc_order(doc: dict[str, Any]) -> UUID:
    """The order a document writes (every part of one document is of one order)."""
    for key in ("new_order", "order", "guarded_step"):
        if key in doc:
            return UUID(str(doc[key]["order_id"]))
    if "expect_order" in doc:
        return UUID(str(doc["expect_order"]))
    for key in ("steps", "new_steps", "events", "audit", "refunds", "attempts", "new_attempts"):
        if doc.get(key):
            return UUID(str(doc[key][0]["order_id"]))
    if doc.get("order_id") is not None:
        return UUID(str(doc["order_id"]))
    raise ValueError("a document that names no order")


def documents(docs: list[dict[str, Any]]) -> str:
    """The jsonb array `apply_changes` reads (orjson: ids, instants and enums natively, the
    attrs values through `_json_value`; several times faster than the standard library)."""
    return orjson.dumps(docs, default=_json_value).decode()


def change_doc(
    change: Change, before: OrderAggregate | None = None, *, new: bool = False
) -> dict[str, Any]:
    """One change's document for `apply_changes`; of the earlier attempts (all but each step's
    latest) only those new or changed since `before`, and the guarded step under its own key,
    with the generation that must hold."""
    doc: dict[str, Any] = {}
    guard = change.guard
    guarded = next((s for s in change.steps if guard and s.step_id == guard.step_id), None)
    if guard is not None and guarded is not None:
        doc["guarded_step"] = rows.step_doc(guarded)
        doc["guard_attempt"] = guard.attempt
        doc["guard_owner"] = guard.owner
    if change.order is not None:
        doc["new_order" if new else "order"] = rows.order_doc(change.order)
    elif before is not None and not change.is_empty:
        doc["order"] = rows.order_doc(before.order)  # unchanged, but its version goes up
    # Inserted or updated: what the change was decided on says which (a step or attempt it
    # did not have is new; without it, everything is).
    doc["new_steps"], doc["steps"] = [], []
    doc["new_attempts"], doc["attempts"] = [], []
    for step in change.steps:
        had = before.step(step.step_id) if before is not None else None
        if step is not guarded:
            doc["steps" if had is not None else "new_steps"].append(rows.step_doc(step))
        # The latest attempt rides on the step's row (`rows.step_doc`); an earlier one is
        # inserted once, by the write that makes it earlier (the next attempt's start), and
        # updated only if it changes afterwards.
        latest = rows.latest_attempt(step)
        in_table = _earlier_attempts(had)
        for attempt in step.attempts:
            if attempt is latest:
                continue
            old = in_table.get(attempt.attempt)
            if old is None:
                doc["new_attempts"].append(rows.attempt_doc(step.order_id, step.step_id, attempt))
            elif old != attempt:
                doc["attempts"].append(rows.attempt_doc(step.order_id, step.step_id, attempt))
    doc["refunds"] = [rows.refund_doc(r) for r in change.refunds]
    doc["events"] = _event_docs(change)
    doc["audit"] = [rows.audit_doc(a) for a in change.audit]
    if change.idempotency is not None:
        doc["idempotency"] = rows.idempotency_doc(change.idempotency)
    if _makes_a_step_due(change, before):
        doc["announce"] = True
    if change.processed_event_id is not None:
        order = before.order if before is not None else change.order
        doc["processed_event_id"] = change.processed_event_id
        doc["order_id"] = order.order_id if order is not None else None
    return doc


def _earlier_attempts(step: Step | None) -> dict[int, Attempt]:
    """The attempts of a step as read that are rows of `finished_attempts`: all but its
    latest, which its row holds."""
    if step is None:
        return {}
    latest = rows.latest_attempt(step)
    return {a.attempt: a for a in step.attempts if a is not latest}


def _event_docs(change: Change) -> list[dict[str, Any]]:
    """The change's events, each with its number within its order (`order_seq`) and, for the
    state changes, the mark that makes it a history entry (`transition`).

    The events of a change are the last ones its order numbered: the order's `event_seq` counts
    every event it emitted (`Draft.emit`), and each event's id is derived from the order and
    that number (`ids.event_id`), which is checked here. Each history entry must be the state
    event of its number, saying the same; a change that breaks either is refused before anything
    is sent, since the store would otherwise keep a history its events do not show."""
    if not change.events:
        if change.history:
            raise ValueError("history entries without their state events")
        return []
    if change.order is None:
        raise ValueError("a change with events carries its order, whose event_seq numbers them")
    order = change.order
    first = order.event_seq - len(change.events) + 1
    transitions = {entry.seq: entry for entry in change.history}
    docs = []
    for number, event in enumerate(change.events, first):
        if event.order_id != order.order_id or event.event_id != ids.event_id(
            order.order_id, number
        ):
            raise ValueError(
                f"event {event.event_id} is not event {number} of order {order.order_id}"
            )
        doc = rows.event_doc(event)
        doc["order_seq"] = number
        entry = transitions.pop(number, None)
        if entry is not None and not _says_the_same(entry, event):
            raise ValueError(f"history entry {number} and its event differ")
        doc["transition"] = entry is not None
        docs.append(doc)
    if transitions:
        raise ValueError(f"history entries without their state events: {sorted(transitions)}")
    return docs


def _says_the_same(entry: HistoryEntry, event: OutboxEvent) -> bool:
    """Whether a state event carries everything its history entry says (the view
    `order_history` reads the entry back from the event)."""
    return (
        event.type == state_event(entry.to_state)
        and event.created_at == entry.at
        and all(event.payload.get(key) == value for key, value in entry.event_payload().items())
    )


def _makes_a_step_due(change: Change, before: OrderAggregate | None) -> bool:
    """Whether the change inserts a step due at its own creation time (both instants from the
    application's clock) or puts a step back to pending: then executors are woken."""
    for step in change.steps:
        if step.status is not StepStatus.PENDING or step.next_attempt_at is None:
            continue
        old = before.step(step.step_id) if before is not None else None
        if old is None and step.next_attempt_at <= step.created_at:
            return True
        if old is not None and old.status is not StepStatus.PENDING:
            return True
    return False


def _json_value(value: object) -> Any:
    """What `json` cannot encode itself: ids, instants (ISO 8601 with offset), attrs values."""
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if attrs.has(type(value)):
        return attrs.asdict(value)  # type: ignore[arg-type]
    raise TypeError(f"cannot store {type(value).__name__} as JSON")


def expecting(doc: dict[str, Any], version: int, kept: OrderAggregate) -> dict[str, Any]:
    """`doc`, to be written only while the order is still as `kept` (at `version`) says.

    The live steps are compared (those a claim may take, `apply_changes`), all but the guarded
    one: its own update is conditioned on the generation the change was decided under, which
    is what the comparison would check, and that update locks it (a comparison locks first,
    one WAL record more per result)."""
    guarded = doc["guarded_step"]["step_id"] if "guarded_step" in doc else None
    return {
        **doc,
        "expect_order": kept.order.order_id,
        "expect_version": version,
        "expect_steps": sorted(
            (
                [str(s.step_id), s.attempt, s.status.value]
                for s in kept.steps
                if s.is_due_or_running and s.step_id != guarded
            ),
            key=lambda entry: str(entry[0]),
        ),
    }


def rejection_doc(change: Change) -> dict[str, Any] | None:
    """The document that records only a change's rejection, if it has one to record."""
    if change.on_reject is None:
        return None
    return change_doc(Change(audit=(change.on_reject,)))
