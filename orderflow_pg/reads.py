"""Reading an order aggregate: the order row, its steps with their attempts, its refunds."""

from __future__ import annotations

from collections import defaultdict
from uuid import UUID

from psycopg.rows import dict_row

from orderflow_core.model import Attempt, OrderAggregate
from orderflow_pg import rows
from orderflow_pg.queries import Connection, query


async def read_aggregate(conn: Connection, order_id: UUID, *, lock: bool) -> OrderAggregate | None:
    """The aggregate as of now; with `lock`, the order and step rows stay locked until commit.

    The four reads go out in one pipeline: one network round trip instead of four.
    """
    params = {"order_id": order_id}
    names = (
        "lock_order" if lock else "get_order",
        "lock_steps" if lock else "get_steps",
        "get_attempts",
        "get_refunds",
    )
    async with conn.pipeline():
        cursors = [conn.cursor(row_factory=dict_row) for _ in names]
        for cursor, name in zip(cursors, names, strict=True):
            await cursor.execute(query(name), params)
        order_rows, step_rows, attempt_rows, refund_rows = [
            await cursor.fetchall() for cursor in cursors
        ]
    if not order_rows:
        return None
    attempts: defaultdict[UUID, list[Attempt]] = defaultdict(list)
    for row in attempt_rows:
        attempts[row["step_id"]].append(rows.attempt_from_row(row))
    return OrderAggregate(
        order=rows.order_from_row(order_rows[0]),
        steps=tuple(rows.step_from_row(r, tuple(attempts[r["step_id"]])) for r in step_rows),
        refunds=tuple(rows.refund_from_row(r) for r in refund_rows),
    )
