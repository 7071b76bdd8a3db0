"""Reading an order aggregate: the order row, its steps with their attempts, its refunds."""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from uuid import UUID

from orderflow_core.model import Attempt, Order, OrderAggregate, Refund
from orderflow_pg import rows
from orderflow_pg.queries import Connection, query


async def read_aggregate(conn: Connection, order_id: UUID, *, lock: bool) -> OrderAggregate | None:
    """The aggregate as of now; with `lock`, the order and step rows stay locked until commit.

    One statement returns the whole aggregate as jsonb (one snapshot, one round trip, and the
    client's per-statement cost paid once instead of four times).
    """
    cursor = conn.cursor()
    name = "lock_aggregate" if lock else "get_aggregate"
    await cursor.execute(query(name), {"order_id": order_id})
    found = await cursor.fetchone()
    if found is None or found[0] is None:
        return None
    return aggregate_from_json(*found)


def aggregate_from_json(
    order: rows.Row, steps: list[rows.Row], attempts: list[rows.Row], refunds: list[rows.Row]
) -> OrderAggregate:
    """The core's value of what `lock_aggregate` / `get_aggregate` returned."""
    by_step: defaultdict[UUID, list[Attempt]] = defaultdict(list)
    for data in attempts:
        attempt = rows.attempt_from_json(data)
        by_step[UUID(data["step_id"])].append(attempt)
    step_rows: list[Any] = [rows.step_json_row(s) for s in steps]
    return OrderAggregate(
        order=rows.order_from_row(rows.json_row(Order, order)),
        steps=tuple(rows.step_from_row(r, tuple(by_step[r["step_id"]])) for r in step_rows),
        refunds=tuple(rows.refund_from_row(rows.json_row(Refund, r)) for r in refunds),
    )
