"""Applying a decided `Change` inside an open transaction: every part or nothing (rule 4)."""

from __future__ import annotations

from uuid import UUID

from orderflow_core.model import Change, Guard, OrderAggregate
from orderflow_core.states import StepStatus
from orderflow_pg import rows
from orderflow_pg.queries import Connection, execute, execute_many


class GuardLost(Exception):
    """The guarded step's UPDATE found no row under the claimed generation: roll back."""


def guard_holds(aggregate: OrderAggregate, guard: Guard) -> bool:
    """Whether the step is still running under the generation a result was computed for."""
    step = aggregate.step(guard.step_id)
    return (
        step is not None
        and step.status is StepStatus.RUNNING
        and step.attempt == guard.attempt
        and step.lease_owner == guard.owner
    )


async def insert_new_order(conn: Connection, change: Change) -> None:
    """Write a new order with everything that comes with it; the key first, so a losing
    concurrent create fails before it does any other work."""
    if change.order is None:
        raise ValueError("create needs an order")
    async with conn.pipeline():
        if change.idempotency is not None:
            params = rows.idempotency_params(change.idempotency)
            await execute(conn, "insert_idempotency", params)
        await execute(conn, "insert_order", rows.order_params(change.order))
        await write_parts(conn, change.order.order_id, change)


async def apply_update(
    conn: Connection,
    before: OrderAggregate,
    change: Change,
    fail_after_order_write: Exception | None = None,
) -> None:
    """Write a decided change to an existing, locked order; raises `GuardLost` if fenced off.

    The fenced step update goes first, on its own, because its row count decides; everything
    else is sent in one pipeline.
    """
    await _write_guarded_step(conn, change)
    async with conn.pipeline():
        if change.order is not None:
            await execute(conn, "update_order", rows.order_params(change.order))
            if fail_after_order_write is not None:
                raise fail_after_order_write
        await write_parts(conn, before.order.order_id, change, before)
        if change.idempotency is not None:
            params = rows.idempotency_params(change.idempotency)
            await execute(conn, "insert_idempotency", params)


async def write_parts(
    conn: Connection, order_id: UUID, change: Change, before: OrderAggregate | None = None
) -> None:
    """Steps (but the guarded one), attempts, refunds, history, events, audit and the
    processed-event mark; of the attempts only those new or changed since `before`."""
    guarded = change.guard.step_id if change.guard is not None else None
    steps = [rows.step_params(s) for s in change.steps if s.step_id != guarded]
    await execute_many(conn, "upsert_step", steps)
    attempts = [
        rows.attempt_params(s.step_id, a)
        for s in change.steps
        for a in s.attempts
        if before is None or a not in _attempts_of(before, s.step_id)
    ]
    await execute_many(conn, "upsert_attempt", attempts)
    await execute_many(conn, "upsert_refund", [rows.refund_params(r) for r in change.refunds])
    await execute_many(conn, "insert_history", [rows.history_params(h) for h in change.history])
    await execute_many(conn, "insert_event", [rows.event_params(e) for e in change.events])
    await execute_many(conn, "insert_audit", [rows.audit_params(a) for a in change.audit])
    if change.processed_event_id is not None:
        params = {"event_id": change.processed_event_id, "order_id": order_id}
        await execute(conn, "insert_processed_event", params)


def _attempts_of(aggregate: OrderAggregate, step_id: UUID) -> tuple[object, ...]:
    step = aggregate.step(step_id)
    return step.attempts if step is not None else ()


async def _write_guarded_step(conn: Connection, change: Change) -> None:
    guard = change.guard
    step = next((s for s in change.steps if guard and s.step_id == guard.step_id), None)
    if guard is None or step is None:
        return
    # Belt and braces: the row lock already made the guard check authoritative, but the
    # fenced UPDATE keeps the rule true even if a caller skipped that lock.
    params = rows.step_params(step)
    params.update(guard_attempt=guard.attempt, guard_owner=guard.owner)
    if await execute(conn, "update_guarded_step", params) == 0:
        raise GuardLost(str(guard))


async def write_rejection(conn: Connection, change: Change) -> None:
    """Record a stale result that was not committed (rule 6), and nothing else."""
    if change.on_reject is not None:
        await execute(conn, "insert_audit", rows.audit_params(change.on_reject))
