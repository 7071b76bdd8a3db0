"""Reading an order aggregate: the order row, its steps with their attempts, its refunds."""

from __future__ import annotations

from collections import defaultdict
from uuid import UUID

from orderflow_core.model import Attempt, OrderAggregate
from orderflow_pg import rows
from orderflow_pg.queries import Connection, fetch_all, fetch_one


async def read_aggregate(conn: Connection, order_id: UUID, *, lock: bool) -> OrderAggregate | None:
    """The aggregate as of now; with `lock`, the order and step rows stay locked until commit."""
    params = {"order_id": order_id}
    order_row = await fetch_one(conn, "lock_order" if lock else "get_order", params)
    if order_row is None:
        return None
    step_rows = await fetch_all(conn, "lock_steps" if lock else "get_steps", params)
    attempts: defaultdict[UUID, list[Attempt]] = defaultdict(list)
    for row in await fetch_all(conn, "get_attempts", params):
        attempts[row["step_id"]].append(rows.attempt_from_row(row))
    refund_rows = await fetch_all(conn, "get_refunds", params)
    return OrderAggregate(
        order=rows.order_from_row(order_row),
        steps=tuple(rows.step_from_row(r, tuple(attempts[r["step_id"]])) for r in step_rows),
        refunds=tuple(rows.refund_from_row(r) for r in refund_rows),
    )
