"""Reading an order aggregate: the order row, its steps with their attempts, its refunds."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import attrs

from orderflow_core.model import (
    Attempt,
    Claim,
    HistoryEntry,
    Order,
    OrderAggregate,
    Refund,
    Step,
)
from orderflow_core.states import StepStatus
from orderflow_pg import rows
from orderflow_pg.queries import Connection, query


async def read_aggregate(conn: Connection, order_id: UUID, *, lock: bool) -> OrderAggregate | None:
    """The aggregate as of now; with `lock`, the order and step rows stay locked until commit.

    One statement returns the whole aggregate as jsonb (one snapshot, one round trip, and the
    client's per-statement cost paid once instead of four times).
    """
    name = "lock_aggregate" if lock else "get_aggregate"
    found = await _fetch(conn, name, order_id)
    if found is None:
        return None
    order, steps, refunds = found
    return _aggregate(order, steps, refunds)


async def read_view(
    conn: Connection, order_id: UUID
) -> tuple[OrderAggregate, list[HistoryEntry]] | None:
    """The aggregate and the order's history, oldest first, from one statement (one snapshot),
    so what a reader is shown never contradicts itself."""
    found = await _fetch(conn, "get_order_view", order_id)
    if found is None:
        return None
    order, steps, refunds, history = found
    entries = [rows.history_from_row(rows.json_row(HistoryEntry, h)) for h in history]
    return _aggregate(order, steps, refunds), entries


async def _fetch(conn: Connection, name: str, order_id: UUID) -> tuple[Any, ...] | None:
    cursor = conn.cursor()
    await cursor.execute(query(name), {"order_id": order_id})
    found = await cursor.fetchone()
    if found is None or found[0] is None:
        return None
    return tuple(found)


async def lock_each(
    conn: Connection, order_ids: Sequence[UUID]
) -> dict[UUID, tuple[OrderAggregate, int]]:
    """`lock_aggregates` as one `lock_aggregate` per order, in order_id order: on Citus, which
    locks rows only in one-shard statements."""
    each: dict[UUID, tuple[OrderAggregate, int]] = {}
    for order_id in sorted(set(order_ids)):
        one = await _fetch(conn, "lock_aggregate", order_id)
        if one is not None:
            order, steps, refunds = one
            each[order_id] = (_aggregate(order, steps, refunds), int(order["version"]))
    return each


async def lock_aggregates(
    conn: Connection, order_ids: Sequence[UUID]
) -> dict[UUID, tuple[OrderAggregate, int]]:
    """Several orders' aggregates with their versions in one statement, locked until commit
    (in order_id order); an unknown order is not in the result."""
    cursor = conn.cursor()
    await cursor.execute(query("lock_aggregates"), {"order_ids": list(order_ids)})
    found: dict[UUID, tuple[OrderAggregate, int]] = {}
    for order, steps, refunds in await cursor.fetchall():
        aggregate = _aggregate(order, steps, refunds)
        found[aggregate.order.order_id] = (aggregate, int(order["version"]))
    return found


def claimed_aggregates(
    found: Sequence[rows.Row], claims: Sequence[Claim]
) -> dict[UUID, tuple[OrderAggregate, int]]:
    """The aggregates `claim_due` returned beside its claims (read before the claim, from the
    statement's snapshot), with every claim of each order put in: its step running under the
    new attempt, owner and lease, as the claim wrote it. An order read without its row (gone
    meanwhile) is left out."""
    aggregates: dict[UUID, tuple[OrderAggregate, int]] = {}
    for row in found:
        if row["order_row"] is None or row["order_id"] in aggregates:
            continue
        aggregate = _aggregate(row["order_row"], row["step_rows"], row["refund_rows"])
        aggregates[row["order_id"]] = (aggregate, int(row["order_row"]["version"]))
    for claim in claims:
        if claim.order_id not in aggregates:
            continue
        aggregate, version = aggregates[claim.order_id]
        claimed = with_claim(aggregate, claim)
        if claimed is None:
            del aggregates[claim.order_id]
            continue
        aggregates[claim.order_id] = (claimed, version)
    return aggregates


def with_claim(aggregate: OrderAggregate, claim: Claim) -> OrderAggregate | None:
    """`aggregate` with `claim` put in, as `claim_due` wrote it: its step running under the
    new attempt, owner and lease (None: the order has no such step)."""
    if aggregate.step(claim.step_id) is None:
        return None
    steps = tuple(
        attrs.evolve(
            step,
            status=StepStatus.RUNNING,
            attempt=claim.attempt,
            lease_owner=claim.owner,
            lease_expires_at=claim.lease_expires_at,
        )
        if step.step_id == claim.step_id
        else step
        for step in aggregate.steps
    )
    return attrs.evolve(aggregate, steps=steps)


def _aggregate(order: rows.Row, steps: list[rows.Row], refunds: list[rows.Row]) -> OrderAggregate:
    return OrderAggregate(
        order=rows.order_from_row(rows.json_row(Order, order)),
        steps=tuple(_step(data) for data in steps),
        refunds=tuple(rows.refund_from_row(rows.json_row(Refund, r)) for r in refunds),
    )


def _step(data: rows.Row) -> Step:
    earlier = tuple(
        rows.attempt_from_row(rows.json_row(Attempt, a)) for a in data.pop("attempt_rows")
    )
    step = rows.json_row(Step, data)
    for instant in ("latest_started_at", "latest_finished_at"):
        if step[instant] is not None:
            step[instant] = datetime.fromisoformat(step[instant])
    return rows.step_from_row(step, earlier)
