"""Years of orders: a database with millions of finished orders against a young one, pruning's
cost to the hot path, a simulated year under the default retention, and DROP PARTITION against
DELETE (docs/retention.md).

`python -m bench --long-horizon N` (or `python -m bench.longhorizon --history N`):

- `history`: the standard template (migrated, seeded, `--prefill` orders run through the real
  path) is copied, and the copy is grown to N finished orders by cloning the real ones in SQL
  (`clone_orders`: every table's rows of each real order copied with new ids and times spread
  over the orders' retention, generate_series, one statement per table); VACUUM (ANALYZE).
  Then the standard closed-loop load (`bench.scenario.run`) on each, alternating, and per run:
  orders/s, POST p99, GET /orders/{id} p99 (sampled after the load), the claim statement's
  time (EXPLAIN ANALYZE of claim_due, nothing due), table and index sizes, autovacuum counts.
- `prune-impact`: the same load with the workers pruning every second (retention 60 s, so the
  cloned history is being archived and removed all through the load) against pruning off.
- `year`: 365 simulated days at a scaled rate (`--year-rate` orders per simulated second, each
  day's orders cloned at that day's time), a prune pass under the default policy at each day's
  end, the clock moved by the pass's `now`; the table sizes per simulated week. Rows scale
  with the rate, so sizes at 100 orders/s are these times 100 / rate.
- `partition`: an audit-like table of M rows, removing its oldest tenth by DELETE against by
  DROP of a partition: time, WAL bytes, and the table's size after (bloat) and after VACUUM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import psycopg
from psycopg import sql

from bench import launch, machine, pgadmin, scenario
from bench.run import _prepare_template, _setup, parse_args
from orderflow_core.testing.clock import FakeClock
from orderflow_pg.prune import Policy, Pruner
from orderflow_pg.queries import query

DAY_S = 86400.0
TABLES = (
    "orders", "workflow_steps", "finished_attempts", "refunds", "outbox", "audit_log",
    "api_idempotency", "processed_events",
)
# Columns whose text must stay unique per clone (keys of their tables).
TEXT_KEYS = {("api_idempotency", "key"), ("workflow_steps", "idempotency_key")}


def _columns(conn: psycopg.Connection[Any], table: str) -> list[tuple[str, str, bool]]:
    """(name, type, identity) of a table's columns, in order."""
    rows = conn.execute(
        "SELECT column_name, data_type, is_identity = 'YES' FROM information_schema.columns"
        " WHERE table_schema = 'public' AND table_name = %s ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def _copy_exprs(
    table: str, cols: list[tuple[str, str, bool]], *, suffix: sql.SQL, rank: sql.SQL
) -> list[sql.Composable]:
    """The select list cloning `cols` of `table`'s row `t` as copy `g.n`: each uuid mapped to
    md5(uuid || suffix) (so a copy's rows refer to each other as the original's do), each time
    moved back by `%(lag)s` plus `rank` times `%(step)s`, each text key suffixed; the rest as is."""
    exprs: list[sql.Composable] = []
    for name, kind, _ in cols:
        col = sql.Identifier("t", name)
        if kind == "uuid":
            exprs.append(sql.SQL("md5({} || {})::uuid").format(col, suffix))
        elif kind == "timestamp with time zone":
            exprs.append(
                sql.SQL("{} - make_interval(secs => %(lag)s + ({}) * %(step)s)").format(col, rank)
            )
        elif (table, name) in TEXT_KEYS:
            exprs.append(sql.SQL("{} || {}").format(col, suffix))
        else:
            exprs.append(col)
    return exprs


# The keys, foreign keys and indexes of the cloned tables, each as (drop, create) statements,
# foreign keys first. A partitioned table's index is dropped and built once for all its
# partitions (its `ON ONLY` definition is made one for the whole tree).
DETACHED_FOREIGN_KEYS = """
SELECT format('ALTER TABLE %%s DROP CONSTRAINT %%I', conrelid::regclass, conname),
       format('ALTER TABLE %%s ADD CONSTRAINT %%I %%s', conrelid::regclass, conname,
              pg_get_constraintdef(oid))
  FROM pg_constraint
 WHERE contype = 'f' AND (conrelid = ANY (%(tables)s::regclass[])
                          OR confrelid = ANY (%(tables)s::regclass[]))
"""
DETACHED_KEYS = """
SELECT format('ALTER TABLE %%s DROP CONSTRAINT %%I', conrelid::regclass, conname),
       format('ALTER TABLE %%s ADD CONSTRAINT %%I %%s', conrelid::regclass, conname,
              pg_get_constraintdef(oid))
  FROM pg_constraint
 WHERE contype IN ('p', 'u', 'x') AND conrelid = ANY (%(tables)s::regclass[])
"""
DETACHED_INDEXES = """
SELECT format('DROP INDEX %%s', i.indexrelid::regclass),
       replace(pg_get_indexdef(i.indexrelid), ' ON ONLY ', ' ON ')
  FROM pg_index AS i
 WHERE i.indrelid = ANY (%(tables)s::regclass[])
   AND NOT EXISTS (SELECT 1 FROM pg_constraint AS k WHERE k.conindid = i.indexrelid)
"""


@contextlib.contextmanager
def keys_detached(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """The cloned tables without their keys, foreign keys and indexes inside the block, built
    again (with a large maintenance_work_mem) at its end, as a restore of a dump does: a clone
    inserted under the indexes updates each uuid-keyed btree at a random place, ~500 orders/s
    here once they outgrow memory; appended bare and indexed once, minutes for millions."""
    tables = {"tables": list(TABLES)}
    found = [conn.execute(q, tables).fetchall()
             for q in (DETACHED_FOREIGN_KEYS, DETACHED_KEYS, DETACHED_INDEXES)]
    for drop, _ in (row for rows in found for row in rows):
        conn.execute(drop)
    yield
    conn.execute("SET maintenance_work_mem = '1GB'")
    for _, create in (row for rows in reversed(found) for row in rows):
        conn.execute(create)


def clone_orders(
    conn: psycopg.Connection[Any], copies: int, *, newest: datetime, span_s: float,
    detached: bool = False,
) -> int:
    """Every order now in the database copied `copies` times, copy n shifted back by
    n * span_s / copies seconds from `newest`; every uuid mapped to md5(uuid || n) so a copy's
    rows refer to each other as the original's do. Outbox rows get new seqs in time order (the
    oldest copies first) and the feed is published through them. With `detached`, the tables'
    keys and indexes are dropped for the inserts and built after (`keys_detached`); the
    database must have no other session then. Returns the orders added."""
    with keys_detached(conn) if detached else contextlib.nullcontext():
        return _clone(conn, copies, newest=newest, span_s=span_s)


def _clone(
    conn: psycopg.Connection[Any], copies: int, *, newest: datetime, span_s: float
) -> int:
    templates = conn.execute("SELECT count(*), max(updated_at) FROM orders").fetchone()
    assert templates is not None
    assert templates[0] > 0
    base_newest: datetime = templates[1]
    step = span_s / copies
    params = {"copies": copies, "step": step, "lag": (base_newest - newest).total_seconds()}
    for table in TABLES:
        cols = [c for c in _columns(conn, table) if not c[2]]
        exprs = _copy_exprs(table, cols, suffix=sql.SQL("'/' || g.n"),
                            rank=sql.SQL("%(copies)s - g.n + 1"))
        order = sql.SQL("ORDER BY g.n, t.seq") if table == "outbox" else sql.SQL("")
        statement = sql.SQL(
            "INSERT INTO {table} ({cols}) SELECT {exprs} FROM generate_series(1, %(copies)s)"
            " AS g(n), {table} AS t {order}"
        ).format(
            table=sql.Identifier(table),
            cols=sql.SQL(", ").join(sql.Identifier(c[0]) for c in cols),
            exprs=sql.SQL(", ").join(exprs),
            order=order,
        )
        conn.execute(statement, params)
    conn.execute("UPDATE outbox_feed SET published_through = (SELECT max(seq) FROM outbox)")
    return int(templates[0]) * copies


def sizes(conn: psycopg.Connection[Any]) -> dict[str, dict[str, int]]:
    """Rows (estimated), table and index bytes, autovacuum/autoanalyze counts per table (a
    partitioned one's summed over its partitions: audit_log)."""
    out = {}
    for table in TABLES:
        row = conn.execute(
            "SELECT sum(greatest(c.reltuples, 0))::bigint, sum(pg_table_size(c.oid))::bigint,"
            " sum(pg_indexes_size(c.oid))::bigint, sum(coalesce(s.autovacuum_count, 0))::bigint,"
            " sum(coalesce(s.autoanalyze_count, 0))::bigint, sum(coalesce(s.n_dead_tup, 0))::bigint"
            " FROM (SELECT %(t)s::regclass AS relid UNION"
            "       SELECT relid FROM pg_partition_tree(%(t)s::regclass) WHERE isleaf) AS p"
            " JOIN pg_class c ON c.oid = p.relid"
            " LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid",
            {"t": table},
        ).fetchone()
        assert row is not None
        out[table] = dict(zip(
            ("rows", "table_bytes", "index_bytes", "autovacuum", "autoanalyze", "dead"),
            row, strict=True,
        ))
    return out


def exact(conn: psycopg.Connection[Any], table: str) -> int:
    row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()
    return int(row[0]) if row else 0


def claim_ms(conn: psycopg.Connection[Any], runs: int = 20) -> float:
    """Median time of claim_due with nothing due (the candidates' index reads on this database)."""
    times = []
    params = {"now": datetime(2000, 1, 1, tzinfo=UTC), "owner": "bench", "limit": 20,
              "expires_at": datetime(2000, 1, 1, tzinfo=UTC), "window": 10}
    for _ in range(runs):
        with conn.transaction(force_rollback=True):
            began = time.perf_counter()
            conn.execute(query("claim_due"), params)
            times.append((time.perf_counter() - began) * 1000)
    return round(statistics.median(times), 3)


async def get_p99_ms(api: str, token: str, ids: list[str], n: int = 1000) -> float:
    """p99 of GET /api/v1/orders/{id} over `n` sampled ids, 8 at a time."""
    lat: list[float] = []
    gate = asyncio.Semaphore(8)
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as session:

        async def one(order_id: str) -> None:
            async with gate:
                began = time.perf_counter()
                async with session.get(f"{api}/api/v1/orders/{order_id}", headers=headers) as r:
                    await r.read()
                    # 404: pruned since it was sampled (the pruning run); not a read of an order
                    assert r.status in (200, 404), r.status
                if r.status == 200:
                    lat.append((time.perf_counter() - began) * 1000)

        await asyncio.gather(*(one(random.choice(ids)) for _ in range(n)))
    lat.sort()
    return round(lat[int(len(lat) * 0.99) - 1], 2)


async def history(args: argparse.Namespace) -> dict[str, Any]:
    """The long-horizon comparison; results as a dict."""
    setup = _setup(args, launch.choose_launcher(args.launcher))
    pgadmin.drop_leftovers(args.database_url, args.db_prefix)
    setup = await _prepare_template(setup, args.prefill)
    big = f"{args.db_prefix}history"
    results: dict[str, Any] = {"machine": machine.facts(args.database_url), "runs": []}
    try:
        url = pgadmin.create_database(args.database_url, big, template=setup.template)
        began = time.monotonic()
        with psycopg.connect(url, autocommit=True) as conn:
            have = conn.execute("SELECT count(*) FROM orders").fetchone()[0]  # type: ignore[index]
            copies = max(1, args.long_horizon // have - 1)
            newest = datetime.now(UTC) - timedelta(minutes=10)
            added = clone_orders(conn, copies, newest=newest, span_s=args.history_span_days * DAY_S,
                                 detached=True)
            results["fill_s"] = round(time.monotonic() - began, 1)
            conn.execute("VACUUM (ANALYZE)")
            results["fill_and_vacuum_s"] = round(time.monotonic() - began, 1)
            results["history_orders"] = have + added
        print(f"history: {have + added} orders in {results['fill_and_vacuum_s']} s", flush=True)
        pgadmin.wait_no_sessions(args.database_url, big)
        young = setup
        old = attrs.evolve(setup, template=big)
        for i in range(args.pairs or 1):
            for label in ("young", "history"):
                # A history run counts its own orders, not the earlier runs' on the same database.
                s = young if label == "young" else attrs.evolve(old, since=datetime.now(UTC))
                figures = await measured(s, f"{label}{i}", args, in_place=label == "history",
                                         env=NOT_PRUNING)
                figures["db"] = label
                results["runs"].append(figures)
                print(f"  {label}: {figures['orders_per_s']} orders/s, POST p99 "
                      f"{figures['post_latency_ms']['p99']} ms, GET p99 {figures['get_p99_ms']} "
                      f"ms, claim {figures['claim_ms']} ms", flush=True)
        if "prune-impact" in args.long_horizon_parts:
            # The history database again, with every worker pruning each second under a 10-minute
            # retention: the cloned history (all older) is archived and removed during the load.
            old = attrs.evolve(old, since=datetime.now(UTC))
            figures = await measured(old, "history_pruning", args, in_place=True,
                                     env=pruning_env(args))
            figures["db"] = "history, pruning every second"
            results["runs"].append(figures)
            print(f"  history+pruning: {figures['orders_per_s']} orders/s, POST p99 "
                  f"{figures['post_latency_ms']['p99']} ms, orders left "
                  f"{figures['sizes']['orders']['rows']}", flush=True)
    finally:
        pgadmin.drop_database(args.database_url, big)
        pgadmin.drop_database(args.database_url, setup.template)
    results["load_average_at_end"] = machine.load_average()
    return results


# The comparison's runs, young and history alike, with the scheduled pruner off: the fill holds
# every kind of row for the whole span (90 days of events and idempotency keys, where the
# default policy keeps 7 days and 1), so a pruner would spend the run catching up on millions
# of rows a service under that policy never has. Its cost is `prune-impact`'s to measure.
NOT_PRUNING = {"ORDERFLOW_PRUNE_INTERVAL_S": "0"}


def pruning_env(args: argparse.Namespace) -> dict[str, str]:
    return {
        "ORDERFLOW_PRUNE_INTERVAL_S": "1", "ORDERFLOW_RETENTION_ORDERS": "600s",
        "ORDERFLOW_RETENTION_FEED": "600s", "ORDERFLOW_RETENTION_IDEMPOTENCY": "600s",
        "ORDERFLOW_RETENTION_AUDIT": "600s", "ORDERFLOW_ARCHIVE_DIR": args.archive_dir,
    }


async def measured(
    setup: scenario.Setup, name: str, args: argparse.Namespace, *, in_place: bool = False,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`scenario.run` plus GET p99, claim time and sizes read before its database is dropped
    (`in_place`: run on the template itself, kept)."""
    extra: dict[str, Any] = {}

    async def after(db_url: str, api_url: str) -> None:
        with psycopg.connect(db_url, autocommit=True) as conn:
            ids = [str(r[0]) for r in conn.execute(
                "SELECT order_id FROM orders ORDER BY random() LIMIT 2000")]
            extra["claim_ms"] = claim_ms(conn)
            extra["sizes"] = sizes(conn)
        extra["get_p99_ms"] = await get_p99_ms(api_url, setup.operator_token, ids)

    figures = await scenario.run(
        setup, name, latency=0, workers=args.long_horizon_workers,
        load_spec=scenario.Load(orders=args.orders), after=after, env=env, in_place=in_place,
    )
    figures.update(extra)
    return figures


async def prune_impact(args: argparse.Namespace) -> dict[str, Any]:
    """The standard load with the workers pruning every second against without."""
    setup = _setup(args, launch.choose_launcher(args.launcher))
    pgadmin.drop_leftovers(args.database_url, args.db_prefix)
    setup = await _prepare_template(setup, args.prefill)
    big = f"{args.db_prefix}history"
    out: dict[str, Any] = {"runs": []}
    try:
        url = pgadmin.create_database(args.database_url, big, template=setup.template)
        with psycopg.connect(url, autocommit=True) as conn:
            clone_orders(conn, args.prune_history // max(args.prefill, 1),
                         newest=datetime.now(UTC) - timedelta(hours=1), span_s=DAY_S)
            conn.execute("VACUUM (ANALYZE)")
        pgadmin.wait_no_sessions(args.database_url, big)
        s = attrs.evolve(setup, template=big)
        pruning = pruning_env(args)
        for i in range(args.pairs or 1):
            for label, env in (("off", NOT_PRUNING), ("pruning", pruning)):
                figures = await measured(s, f"prune_{label}{i}", args, env=env)
                figures["pruning"] = label
                out["runs"].append(figures)
                print(f"  pruning {label}: {figures['orders_per_s']} orders/s, POST p99 "
                      f"{figures['post_latency_ms']['p99']} ms, orders left "
                      f"{figures['sizes']['orders']['rows']}", flush=True)
    finally:
        pgadmin.drop_database(args.database_url, big)
        pgadmin.drop_database(args.database_url, setup.template)
    return out


async def year(args: argparse.Namespace) -> dict[str, Any]:
    """365 simulated days at `--year-rate` orders per simulated second under the default policy."""
    setup = _setup(args, launch.choose_launcher(args.launcher))
    pgadmin.drop_leftovers(args.database_url, args.db_prefix)
    setup = await _prepare_template(setup, args.year_template_orders)
    name = f"{args.db_prefix}year"
    url = pgadmin.create_database(args.database_url, name, template=setup.template)
    weeks: list[dict[str, Any]] = []
    per_day = int(args.year_rate * DAY_S)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE template_ids AS SELECT order_id FROM orders")
            start = datetime(2027, 1, 1, tzinfo=UTC)
            clock = FakeClock(start)
            policy = Policy(orders_s=90 * DAY_S, feed_s=7 * DAY_S, idempotency_s=DAY_S,
                            audit_s=400 * DAY_S, batch=500)
            pruner = Pruner(url, clock, policy, Path(args.archive_dir))
            templates = conn.execute("SELECT count(*) FROM template_ids").fetchone()[0]  # type: ignore[index]
            began = time.monotonic()
            step_days = args.year_step_days
            for day in range(step_days - 1, args.year_days, step_days):
                clock.advance(DAY_S * step_days)
                # The step's orders: the template orders (kept aside) cloned at its times.
                add_day(conn, per_day * step_days // templates, clock.now(), day,
                        span_s=DAY_S * step_days)
                report = await pruner.run()
                assert report is not None
                # Autovacuum's part: in real time it runs many times between two passes; the
                # compressed year gives it no time, so without this the rows stop growing but
                # the files do not (the removed rows' space is reused only once vacuumed).
                conn.execute("VACUUM")
                if (day + 1) % 7 == 0 or step_days >= 7:
                    conn.execute("ANALYZE")
                    seen = sizes(conn)
                    week = {"day": day + 1,
                            "bytes": {t: v["table_bytes"] + v["index_bytes"]
                                      for t, v in seen.items()},
                            "rows": {t: exact(conn, t) for t in TABLES},
                            "pruned_orders_last_day": report.orders,
                            "wall_s": round(time.monotonic() - began, 1)}
                    weeks.append(week)
                    print(f"  day {day + 1}: rows {week['rows']}", flush=True)
    finally:
        pgadmin.drop_database(args.database_url, name)
        pgadmin.drop_database(args.database_url, setup.template)
    return {"orders_per_simulated_day": per_day, "weeks": weeks}


def add_day(
    conn: psycopg.Connection[Any], copies: int, day_end: datetime, day: int,
    span_s: float = DAY_S,
) -> None:
    """`copies` clones of the template orders spread over the simulated day ending `day_end`.
    The templates are the first orders; their own rows are moved aside once (kept in a shadow
    schema) so the clones of each day come from them alone."""
    if not conn.execute("SELECT to_regclass('shadow.orders')").fetchone()[0]:  # type: ignore[index]
        conn.execute("CREATE SCHEMA IF NOT EXISTS shadow")
        for table in TABLES:
            conn.execute(sql.SQL("CREATE TABLE shadow.{t} AS SELECT * FROM {t}").format(
                t=sql.Identifier(table)))
        for table in TABLES:
            conn.execute(sql.SQL("DELETE FROM {t}").format(t=sql.Identifier(table)))
    # Clone from the shadow copies into the live tables.
    row = conn.execute("SELECT max(updated_at) FROM shadow.orders").fetchone()
    assert row is not None
    lag = (row[0] - day_end).total_seconds()
    step = span_s / copies
    for table in TABLES:
        cols = [c for c in _columns(conn, table) if not c[2]]
        exprs = _copy_exprs(table, cols, suffix=sql.SQL("'/' || %(day)s || '/' || g.n"),
                            rank=sql.SQL("%(copies)s - g.n"))
        order = sql.SQL("ORDER BY g.n, t.seq") if table == "outbox" else sql.SQL("")
        conn.execute(sql.SQL(
            "INSERT INTO {table} ({cols}) SELECT {exprs} FROM generate_series(1, %(copies)s)"
            " AS g(n), shadow.{table} AS t {order}"
        ).format(
            table=sql.Identifier(table),
            cols=sql.SQL(", ").join(sql.Identifier(c[0]) for c in cols),
            exprs=sql.SQL(", ").join(exprs), order=order,
        ), {"copies": copies, "lag": lag, "step": step, "day": day})
    conn.execute("UPDATE outbox_feed SET published_through = (SELECT max(seq) FROM outbox)")


def partition(args: argparse.Namespace) -> dict[str, Any]:
    """DELETE of the oldest tenth of an audit-like table against DROP of its partition."""
    name = f"{args.db_prefix}partition"
    url = pgadmin.create_database(args.database_url, name)
    rows = args.partition_rows
    out: dict[str, Any] = {"rows": rows}
    fill = (
        "INSERT INTO {t} (order_id, at, actor, action, outcome, details)"
        " SELECT md5(n::text)::uuid, timestamptz '2027-01-01' + n * interval '1 second',"
        " 'system', 'step.succeeded', 'ok', jsonb_build_object('step', n)"
        " FROM generate_series(1, %(rows)s) AS n"
    )
    cutoff = "timestamptz '2027-01-01' + %(tenth)s * interval '1 second'"
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE plain (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
                         " order_id uuid NOT NULL, at timestamptz NOT NULL, actor text NOT NULL,"
                         " action text NOT NULL, outcome text NOT NULL, details jsonb NOT NULL)")
            conn.execute("CREATE INDEX ON plain (order_id, id)")
            conn.execute(
                "CREATE TABLE parted (id bigint GENERATED ALWAYS AS IDENTITY, order_id uuid NOT"
                " NULL, at timestamptz NOT NULL, actor text NOT NULL, action text NOT NULL,"
                " outcome text NOT NULL, details jsonb NOT NULL, PRIMARY KEY (at, id))"
                " PARTITION BY RANGE (at)")
            conn.execute("CREATE INDEX ON parted (order_id, id)")
            tenth = rows // 10
            for i in range(10):
                conn.execute(sql.SQL(
                    "CREATE TABLE {p} PARTITION OF parted FOR VALUES FROM"
                    " (timestamptz '2027-01-01' + {a} * interval '1 second')"
                    " TO (timestamptz '2027-01-01' + {b} * interval '1 second')").format(
                    p=sql.Identifier(f"parted_{i}"), a=sql.Literal(i * tenth + 1 if i else 0),
                    b=sql.Literal((i + 1) * tenth + 1 if i < 9 else rows + 10)))
            for t in ("plain", "parted"):
                conn.execute(sql.SQL(fill).format(t=sql.Identifier(t)), {"rows": rows})
            conn.execute("VACUUM (ANALYZE) plain, parted")
            conn.execute("CHECKPOINT")
            notices: list[str] = []
            conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
            for label, statement in (
                ("delete", sql.SQL("EXPLAIN (ANALYZE, WAL, FORMAT JSON) DELETE FROM plain"
                                   " WHERE at <= " + cutoff)),
                ("drop", sql.SQL("DROP TABLE parted_0")),
            ):
                size_of = ("SELECT pg_total_relation_size('plain')" if label == "delete" else
                           "SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits"
                           " WHERE inhparent = 'parted'::regclass")
                before_size = conn.execute(size_of).fetchone()[0]  # type: ignore[index]
                lsn0 = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
                began = time.perf_counter()
                cur = conn.execute(statement, {"tenth": tenth})
                plan = cur.fetchone() if label == "delete" else None
                took = time.perf_counter() - began
                server_wal = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)",
                                          (lsn0,)).fetchone()[0]  # type: ignore[index]
                wal = plan[0][0]["Plan"]["WAL Bytes"] if plan else None
                after = conn.execute(size_of).fetchone()[0]  # type: ignore[index]
                notices.clear()
                vac0 = time.perf_counter()
                conn.execute("VACUUM (VERBOSE) plain" if label == "delete" else
                             "VACUUM (VERBOSE) parted")
                vac_s = time.perf_counter() - vac0
                vac_wal = sum(int(m.split(" bytes")[0].rsplit(" ", 1)[1])
                              for n in notices for m in n.splitlines() if m.startswith("WAL usage"))
                after_vacuum = conn.execute(size_of).fetchone()[0]  # type: ignore[index]
                out[label] = {
                    "seconds": round(took, 3), "statement_wal_bytes": wal,
                    "server_wal_bytes_meanwhile": int(server_wal),
                    "size_before": int(before_size), "size_after": int(after),
                    "vacuum_seconds": round(vac_s, 3), "vacuum_wal_bytes": vac_wal,
                    "size_after_vacuum": int(after_vacuum),
                }
                print(f"  {label}: {out[label]}", flush=True)
    finally:
        pgadmin.drop_database(args.database_url, name)
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The long-horizon options (also accepted by `python -m bench`)."""
    p.add_argument("--long-horizon", type=int, default=0, metavar="N",
                   help="run the long-horizon comparison with N finished orders (e.g. 5000000)")
    p.add_argument("--long-horizon-parts", default="history,prune-impact,year,partition")
    p.add_argument("--long-horizon-workers", type=int, default=1)
    p.add_argument("--history-span-days", type=float, default=90.0)
    p.add_argument("--prune-history", type=int, default=200_000)
    p.add_argument("--year-rate", type=float, default=0.01,
                   help="simulated orders per simulated second (scaled down from 100)")
    p.add_argument("--year-days", type=int, default=365)
    p.add_argument("--year-step-days", type=int, default=1,
                   help="simulated days between prune passes (orders added per step)")
    p.add_argument("--year-template-orders", type=int, default=24)
    p.add_argument("--partition-rows", type=int, default=2_000_000)
    p.add_argument("--archive-dir", default="/tmp/orderflow-bench-archive")
    p.add_argument("--long-horizon-out", type=Path, default=Path("bench/results/longhorizon.json"))


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    parts = set(args.long_horizon_parts.split(","))
    results: dict[str, Any] = {"options": {k: str(v) for k, v in vars(args).items()},
                               "load_average_at_start": machine.load_average()}
    if "partition" in parts:
        print("partition: DELETE against DROP PARTITION", flush=True)
        results["partition"] = partition(args)
        _save(args, results)
    if "history" in parts:
        print(f"history: {args.long_horizon} orders against {args.prefill}", flush=True)
        results["history"] = await history(args)
        _save(args, results)
    if "prune-impact" in parts and "history" not in parts:
        print("prune-impact: pruning every second against off", flush=True)
        results["prune_impact"] = await prune_impact(args)
    if "year" in parts:
        print(f"year: {args.year_days} days at {args.year_rate} orders/s", flush=True)
        results["year"] = await year(args)
    results["load_average_at_end"] = machine.load_average()
    return results


def _save(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """Write what is measured so far (a later part failing keeps the earlier ones)."""
    args.long_horizon_out.parent.mkdir(parents=True, exist_ok=True)
    args.long_horizon_out.write_text(json.dumps(results, indent=1, default=str))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not args.long_horizon:
        args.long_horizon = 1_000_000
    results = asyncio.run(main_async(args))
    _save(args, results)
    print(f"written {args.long_horizon_out}")


if __name__ == "__main__":
    main()
