"""`orderflow migrate --distribute`: the schema on a Citus cluster, distributed by order.

Every order-scoped table is distributed by its order (`order_id`; the idempotency keys by
their placement, `ids.idempotency_placement`) and co-located with `orders`, so each order's
rows lie on one shard and the hot statements each touch one shard (docs/citus.md). The small
shared table `users` is replicated to every node. The relay's mark (`outbox_feed`) and the
migration ledger stay plain tables of the coordinator (Citus carries a later migration's DDL
on a distributed table to its shards). The one-order write, `orderflow_apply_order`
(citus.sql), is created and distributed with the orders, so Citus runs each call on the node
of its order's shard. Idempotent: a table already distributed is left as it is, so running it
again after an upgrade distributes only what a newer migration added.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from orderflow_core.errors import OrderflowError, StoreUnavailable
from orderflow_pg.migrate import migrate
from orderflow_pg.queries import Connection, execute, fetch_all, fetch_one

# (table, distribution column), `orders` first: the others are co-located with it.
DISTRIBUTED = (
    ("orders", "order_id"),
    ("workflow_steps", "order_id"),
    ("finished_attempts", "order_id"),
    ("refunds", "order_id"),
    ("outbox", "order_id"),
    ("audit_log", "order_id"),
    ("processed_events", "order_id"),
    ("api_idempotency", "placement"),
)
REFERENCE = ("users",)
# Tables that stay plain tables of the coordinator. `outbox_feed` is the relay's one-row mark:
# replicated to every node, each published batch was a two-phase commit over all of them;
# on the coordinator it commits there alone, and the feed's reads (`events`,
# `unpublished_events`) take its one value to the workers as their parameter.
COORDINATOR = ("outbox_feed",)
# The coordinator plans a one-order write (`apply_order_changes`) as single-shard parts whose
# estimated costs pass PostgreSQL's JIT threshold: compiling took ~2 s per statement here, for
# a statement that runs in milliseconds. Off for this database (an identifier, composed).
NO_JIT = "ALTER DATABASE {} SET jit = off"
# Citus's own default is 32; see ORDERFLOW_CITUS_SHARD_COUNT (orderflow/config.py).
DEFAULT_SHARD_COUNT = 32


class CitusMissing(OrderflowError):
    """`migrate --distribute` on a database without the Citus extension."""

    code = "citus_missing"


async def distribute(url: str, *, shard_count: int = DEFAULT_SHARD_COUNT) -> list[str]:
    """Apply pending migrations, then distribute what is not yet; what was done, by line."""
    if shard_count < 1:
        raise ValueError("the shard count must be at least 1")
    done = [f"applied {name}" for name in await migrate(url)]
    try:
        connect = psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10)
        async with await connect as conn:
            done.extend(await _distribute(conn, shard_count))
    except psycopg.OperationalError as exc:
        raise StoreUnavailable(f"distribute: {exc}") from exc
    return done


async def _distribute(conn: Connection, shard_count: int) -> list[str]:
    found = await fetch_one(conn, "citus_installed")
    if not (found and found["installed"]):
        raise CitusMissing(
            "the database has no Citus extension (CREATE EXTENSION citus on a coordinator "
            "whose workers are added; docs/citus.md)"
        )
    done: list[str] = []
    moved: list[str] = []
    known = {r["name"]: r["method"] for r in await fetch_all(conn, "citus_tables")}
    for table, column in DISTRIBUTED:
        if table in known:
            continue
        colocate = "none" if table == "orders" else "orders"
        params = {
            "table": table,
            "column": column,
            "colocate_with": colocate,
            "shard_count": shard_count if table == "orders" else None,  # the group's
        }
        await execute(conn, "distribute_table", params)
        moved.append(table)
        done.append(f"distributed {table} by {column} ({shard_count} shards)")
    for table in REFERENCE:
        if table in known:
            continue
        await execute(conn, "reference_table", {"table": table})
        moved.append(table)
        done.append(f"replicated {table} on every node")
    for table in COORDINATOR:
        if known.get(table) == "n":  # replicated by an earlier version
            await execute(conn, "keep_on_coordinator", {"table": table})
            done.append(f"kept {table} on the coordinator")
    # Once all are distributed (a table referenced by another's foreign key keeps its copy
    # until the other is distributed too)
    for table in moved:
        await execute(conn, "drop_local_copy", {"table": table})
    # The one-order write run on its shard's node (replaced, so an upgrade brings its newest
    # form; its distribution is idempotent)
    await execute(conn, "create_apply_order")
    await execute(conn, "distribute_apply_order")
    name = await fetch_one(conn, "current_database")
    assert name is not None
    await conn.execute(sql.SQL(NO_JIT).format(sql.Identifier(name["name"])))
    return done
