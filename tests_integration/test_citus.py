"""orderflow on a Citus cluster (1 coordinator + 2 workers): `migrate --distribute`, and the
hot path's statements each on one shard. The store's behaviour suite runs on the cluster too
(test_store_behaviour.py, its `citus` parameter)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from api_harness import live, make_world
from builders import T0, at, creation, new_order, reserved_change

from orderflow.config import DAY_S
from orderflow_core import ids
from orderflow_pg import PgOrderStore, prune
from orderflow_pg.distribute import DISTRIBUTED, REFERENCE, distribute
from orderflow_pg.prune import Policy, Pruner, archive_files, archived_orders
from orderflow_pg.queries import queries
from orderflow_pg.writes import change_doc, documents

pytestmark = pytest.mark.citus
POLICY = Policy(orders_s=90 * DAY_S, feed_s=7 * DAY_S, idempotency_s=DAY_S, audit_s=400 * DAY_S)


def _orderflow(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ORDERFLOW_DATABASE_URL": url, "ORDERFLOW_CITUS_SHARD_COUNT": "4"}
    return subprocess.run(
        [sys.executable, "-m", "orderflow", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_migrate_distribute_is_idempotent_and_leaves_every_table_where_it_belongs(
    citus_url: str,
) -> None:
    again = _orderflow(citus_url, "migrate", "--distribute")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "schema is up to date and distributed"
    with psycopg.connect(citus_url) as conn:
        placed = dict(
            conn.execute(
                "SELECT logicalrelid::regclass::text, colocationid FROM pg_dist_partition"
                " WHERE partmethod = 'h'"
            ).fetchall()
        )
        reference = {
            r[0]
            for r in conn.execute(
                "SELECT logicalrelid::regclass::text FROM pg_dist_partition WHERE partmethod = 'n'"
            ).fetchall()
        }
        columns = dict(
            conn.execute(
                "SELECT table_name::text, distribution_column FROM citus_tables"
                " WHERE citus_table_type = 'distributed'"
            ).fetchall()
        )
        partitions = {  # the audit log's months and DEFAULT (0041), distributed with it
            r[0]
            for r in conn.execute("SELECT inhrelid::regclass::text FROM pg_inherits").fetchall()
        }
    assert "audit_log_default" in partitions
    assert set(placed) - partitions == {t for t, _ in DISTRIBUTED}
    assert len(set(placed.values())) == 1  # one co-location group: every order on one shard
    assert {t: c for t, c in columns.items() if t not in partitions} == dict(DISTRIBUTED)
    assert reference == set(REFERENCE)
    with psycopg.connect(citus_url) as conn:
        # The relay's mark is a plain table of the coordinator: no Citus table at all
        assert conn.execute(
            "SELECT count(*) FROM pg_dist_partition WHERE logicalrelid = 'outbox_feed'::regclass"
        ).fetchone() == (0,)
        # The one-order write runs on its order's node, co-located with the orders
        [(arg, forced, same_group)] = conn.execute(
            "SELECT o.distribution_argument_index, o.force_delegation,"
            " o.colocationid = (SELECT colocationid FROM pg_dist_partition"
            "   WHERE logicalrelid = 'orders'::regclass)"
            " FROM pg_dist_object AS o"
            " WHERE o.objid = 'orderflow_apply_order(uuid, jsonb)'::regprocedure"
        ).fetchall()
        assert (arg, forced, same_group) == (0, True, True)


@pytest.mark.postgres
def test_migrate_distribute_without_citus_exits_non_zero_with_one_line(pg_url: str) -> None:
    done = _orderflow(pg_url, "migrate", "--distribute")
    assert done.returncode == 1
    [line] = [x for x in done.stderr.splitlines() if "citus" in x.lower()]
    assert line.startswith("orderflow: "), line
    assert "Traceback" not in done.stderr


def test_distributing_a_database_that_already_holds_orders_keeps_them(
    citus_url: str, run: Any
) -> None:
    """A single-server database of orders, then distributed: the same orders read back."""
    with psycopg.connect(citus_url, autocommit=True) as conn:
        conn.execute("CREATE DATABASE orderflow_citus_filled")
    filled = citus_url.replace("dbname=orderflow_citus", "dbname=orderflow_citus_filled")
    if filled == citus_url:
        pytest.skip("the cluster's database is not the harness's own (ORDERFLOW_TEST_CITUS_URL)")
    try:
        _prepare_nodes(citus_url, "orderflow_citus_filled")
        orders = [new_order() for _ in range(6)]

        async def fill_then_read() -> list[Any]:
            from orderflow_pg import migrate

            await migrate(filled)
            async with PgOrderStore.open(filled) as store:
                assert not store.distributed
                for order in orders:
                    await store.create(creation(order, key=str(order.order_id)))
            await distribute(filled, shard_count=4)
            async with PgOrderStore.open(filled) as store:
                assert store.distributed
                return [await store.load(o.order_id) for o in orders]

        loaded = run(fill_then_read())
        assert [a.order.order_id for a in loaded] == [o.order_id for o in orders]
    finally:
        _drop_on_nodes(citus_url, "orderflow_citus_filled")


def _nodes(citus_url: str) -> list[tuple[str, int]]:
    with psycopg.connect(citus_url) as conn:
        return [
            (r[0], r[1])
            for r in conn.execute(
                "SELECT nodename, nodeport FROM pg_dist_node WHERE groupid <> 0"
            ).fetchall()
        ]


def _prepare_nodes(citus_url: str, name: str) -> None:
    """`name` on every worker with Citus in it, and the workers added to its coordinator."""
    for host, port in _nodes(citus_url):
        node = f"host={host} port={port} user=postgres dbname=postgres"
        with psycopg.connect(node, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        with psycopg.connect(
            node.replace("dbname=postgres", f"dbname={name}"), autocommit=True
        ) as c:
            c.execute("CREATE EXTENSION citus")
    coordinator = citus_url.replace("dbname=orderflow_citus", f"dbname={name}")
    with psycopg.connect(coordinator, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION citus")
        port = conn.execute("SELECT current_setting('port')::int").fetchone()
        assert port is not None
        conn.execute("SELECT citus_set_coordinator_host('127.0.0.1', %s)", (port[0],))
        for host, worker in _nodes(citus_url):
            conn.execute("SELECT citus_add_node(%s, %s)", (host, worker))


def _drop_on_nodes(citus_url: str, name: str) -> None:
    with psycopg.connect(citus_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    for host, port in _nodes(citus_url):
        node = f"host={host} port={port} user=postgres dbname=postgres"
        with psycopg.connect(node, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _tasks(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> list[Any]:
    """Per distributed (sub)plan of a named statement: how many tasks, and on which node."""
    row = conn.execute("EXPLAIN (FORMAT JSON) " + queries()[name], params).fetchone()
    assert row is not None
    counts: list[Any] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            job = node.get("Distributed Query", {}).get("Job")
            if job is not None:
                tasks = job.get("Tasks", [])
                nodes = {t.get("Node") for t in tasks}
                counts.append((job["Task Count"], nodes))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(row[0])
    return counts


def _one_shard(counts: list[Any], coordinator: int) -> None:
    """Every part one task, and every task that reads or writes a shard on one worker (the
    coordinator, which holds no shard, computes the parts that read only parameters)."""
    assert counts, "not a distributed plan"
    assert all(count == 1 for count, _ in counts), counts
    nodes = set().union(*(nodes for _, nodes in counts))
    workers = {n for n in nodes if f"port={coordinator} " not in n}
    assert len(workers) == 1, counts


ROUTER = (
    "get_order_view",
    "get_aggregate",
    "lock_aggregate",
    "renew_lease",
    "claim_order",
    "find_idempotency",
    "is_processed_event",
    "history",
    "audit_entries",
)


def test_every_hot_statement_runs_on_one_shard(
    citus_store: PgOrderStore, citus_url: str, run: Any
) -> None:
    """EXPLAIN of each hot statement by its name in queries.sql: one task (router), or, for the
    write (`apply_order_changes`), every part of it one task on one and the same node."""
    order = new_order()
    order = attrs_evolve(order, ids.keyed_order_id("alice", "key-1"))
    change = creation(order, key="key-1")
    run(citus_store.create(change))
    oid = order.order_id
    params: dict[str, Any] = {
        "order_id": oid,
        "step_id": uuid.uuid4(),
        "attempt": 1,
        "owner": "w",
        "now": T0,
        "expires_at": T0,
        "seqs": [1],
        "user_id": "alice",
        "scope": "create_order",
        "key": "key-1",
        "placement": ids.idempotency_placement("alice", "create_order", "key-1"),
        "event_id": uuid.uuid4(),
    }
    with psycopg.connect(citus_url) as conn:
        port = conn.execute("SELECT current_setting('port')::int").fetchone()
        assert port is not None
        coordinator = port[0]
        for name in ROUTER:
            counts = _tasks(conn, name, params)
            assert counts[0][0] == 1, (name, counts)  # a router plan: one task
            _one_shard(counts, coordinator)
        # The create as the API sends it: order and idempotency key on the order's shard
        doc = change_doc(
            creation(attrs_evolve(new_order(), ids.keyed_order_id("bob", "k")), key="k"), new=True
        )
        doc["idempotency"]["user_id"] = "bob"
        doc["idempotency"]["placement"] = str(ids.idempotency_placement("bob", "create_order", "k"))
        new_id = doc["new_order"]["order_id"]
        _one_shard(
            _tasks(conn, "apply_order_changes", {"docs": documents([doc]), "order_id": new_id}),
            coordinator,
        )
        # What the store sends instead: the call, forwarded whole to the order's worker
        counts = _tasks(conn, "apply_order", {"order_id": new_id, "doc": documents([doc])[1:-1]})
        assert [count for count, _ in counts] == [1], counts
        _one_shard(counts, coordinator)
        # A start or result write: the order's row, its step, its events and audit
        aggregate = run(citus_store.load(oid))
        doc = change_doc(change, aggregate)
        _one_shard(
            _tasks(conn, "apply_order_changes", {"docs": documents([doc]), "order_id": oid}),
            coordinator,
        )
        # The claim's candidate read takes no lock: it may read every shard
        counts = _tasks(conn, "claim_candidates", {"now": T0, "window": 10})
        assert counts
        assert "FOR UPDATE" not in queries()["claim_candidates"]


def attrs_evolve(order: Any, order_id: uuid.UUID) -> Any:
    import attrs

    return attrs.evolve(order, order_id=order_id)


def test_a_create_through_the_store_keeps_its_order_and_key_on_one_shard(
    citus_store: PgOrderStore, citus_url: str, run: Any
) -> None:
    order = attrs_evolve(new_order(), ids.keyed_order_id("alice", "key-9"))
    run(citus_store.create(creation(order, key="key-9")))
    with psycopg.connect(citus_url) as conn:
        shards = conn.execute(
            "SELECT get_shard_id_for_distribution_column('orders', %s),"
            " get_shard_id_for_distribution_column('api_idempotency', %s)",
            (order.order_id, ids.idempotency_placement("alice", "create_order", "key-9")),
        ).fetchone()
    assert shards is not None
    # co-located: the same shard index in both tables' shard lists
    with psycopg.connect(citus_url) as conn:
        index = [
            conn.execute(
                "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = %s::regclass"
                " AND shardid <= %s",
                (table, shard),
            ).fetchone()
            for table, shard in (("orders", shards[0]), ("api_idempotency", shards[1]))
        ]
    assert index[0] == index[1]
    found = run(citus_store.find_idempotency("alice", "create_order", "key-9"))
    assert found is not None
    assert found.resource_id == order.order_id


@pytest.fixture
def prepares_kept(citus_url: str) -> Any:
    """Citus's 2PC recovery off while the test runs, so `pg_dist_transaction` keeps one row per
    node a transaction PREPAREd on; a function counting them."""
    with psycopg.connect(citus_url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET citus.recover_2pc_interval = -1")
        conn.execute("SELECT pg_reload_conf()")

    def count() -> int:
        with psycopg.connect(citus_url, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_dist_transaction").fetchone()
        assert row is not None
        return int(row[0])

    try:
        yield count
    finally:
        with psycopg.connect(citus_url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET citus.recover_2pc_interval")
            conn.execute("SELECT pg_reload_conf()")


def test_an_orders_writes_and_the_relays_mark_commit_without_two_phase_commit(
    citus_store: PgOrderStore, prepares_kept: Any, run: Any
) -> None:
    """A create, a claim, a fenced step result and the relay's published mark each commit on
    one node (the order's worker, or the coordinator for the mark): no PREPARE anywhere. The
    events still get the coordinator's feed numbers, in the order's own order."""
    before = prepares_kept()
    order = attrs_evolve(new_order(), ids.keyed_order_id("alice", "key-2pc"))
    run(citus_store.create(creation(order, key="key-2pc")))
    [claim] = run(citus_store.claim_due(owner="w1", now=at(1), limit=5, lease_s=30))
    written = run(
        citus_store.update_many(
            [
                (
                    order.order_id,
                    lambda a: (reserved_change(a.order, a.steps[0], claim, worker="w1"), 1),
                )
            ]
        )
    )
    assert written == [1]
    events = run(citus_store.unpublished_events(10))
    assert [e.type for e in events] == ["order.created", "order.reserved"]
    assert events[0].seq < events[1].seq
    run(citus_store.mark_published([e.seq for e in events], at(2)))
    assert run(citus_store.unpublished_events(10)) == []
    aggregate = run(citus_store.load(order.order_id))
    assert aggregate is not None
    assert aggregate.order.state.value == "reserved"
    assert prepares_kept() == before


def test_a_worker_sigkilled_under_load_loses_no_order_and_charges_none_twice(
    procs: list[Any], citus_url: str
) -> None:
    """Two `orderflow worker` processes on the cluster; one is SIGKILLed while orders are in
    flight. Every order ships, each charge step succeeds once, and the steps the dead worker
    held were taken over under a later generation (attempt)."""
    from processes import Proc, base_env, eventually, free_port
    from test_cli import _count, _create_orders, _worker_env

    mocks_port = free_port()
    mocks = Proc("mocks", base_env(ORDERFLOW_MOCKS_PORT=str(mocks_port)))
    procs.append(mocks)
    mocks.wait_for("listening")
    _create_orders(citus_url, 30)
    short = {
        "ORDERFLOW_MAX_CONCURRENT_STEPS": "5",
        "ORDERFLOW_LEASE_S": "4",
        "ORDERFLOW_HEARTBEAT_S": "1",
    }
    workers = [
        Proc("worker", _worker_env(citus_url, mocks_port, name, **short))
        for name in ("worker-a", "worker-b")
    ]
    procs.extend(workers)
    shipped = "SELECT count(*) FROM orders WHERE state = 'shipped'"
    eventually(lambda: _count(citus_url, shipped) >= 3, timeout_s=300, what="3 shipped")
    workers[0].kill()
    eventually(lambda: _count(citus_url, shipped) == 30, timeout_s=600, what="30 shipped")
    charged = "SELECT count(*) FROM workflow_steps WHERE kind = 'charge' AND status = 'succeeded'"
    assert _count(citus_url, charged) == 30
    twice = (
        "SELECT count(*) FROM (SELECT order_id FROM workflow_steps WHERE kind = 'charge'"
        " GROUP BY order_id HAVING count(*) > 1) AS t"
    )
    assert _count(citus_url, twice) == 0
    assert _count(citus_url, "SELECT count(*) FROM orders") == 30


def test_a_citus_worker_node_restarted_under_load_loses_no_order_and_charges_none_twice(
    procs: list[Any], citus_url: str
) -> None:
    """Two `orderflow worker` processes on the cluster; one Citus worker node is stopped at
    once (as a crash) and started again while orders are in flight. Every order ships, each
    charge step succeeds once."""
    from citus_fixtures import LOCAL
    from processes import Proc, base_env, eventually, free_port
    from test_cli import _count, _create_orders, _worker_env

    if not LOCAL:
        pytest.skip("restarts a node of the harness's own cluster (ORDERFLOW_TEST_CITUS_URL set)")
    mocks_port = free_port()
    mocks = Proc("mocks", base_env(ORDERFLOW_MOCKS_PORT=str(mocks_port)))
    procs.append(mocks)
    mocks.wait_for("listening")
    _create_orders(citus_url, 30)
    short = {
        "ORDERFLOW_MAX_CONCURRENT_STEPS": "5",
        "ORDERFLOW_LEASE_S": "4",
        "ORDERFLOW_HEARTBEAT_S": "1",
    }
    procs.extend(
        Proc("worker", _worker_env(citus_url, mocks_port, name, **short))
        for name in ("worker-a", "worker-b")
    )
    shipped = "SELECT count(*) FROM orders WHERE state = 'shipped'"
    eventually(lambda: _count(citus_url, shipped) >= 3, timeout_s=300, what="3 shipped")
    LOCAL[0].restart_node(LOCAL[0].workers[0])
    eventually(lambda: _count(citus_url, shipped) == 30, timeout_s=600, what="30 shipped")
    charged = "SELECT count(*) FROM workflow_steps WHERE kind = 'charge' AND status = 'succeeded'"
    assert _count(citus_url, charged) == 30
    twice = (
        "SELECT count(*) FROM (SELECT order_id FROM workflow_steps WHERE kind = 'charge'"
        " GROUP BY order_id HAVING count(*) > 1) AS t"
    )
    assert _count(citus_url, twice) == 0
    assert _count(citus_url, "SELECT count(*) FROM orders") == 30


def test_prune_on_a_distributed_database_archives_and_removes_finished_orders(
    citus_store: PgOrderStore, citus_url: str, run: Any, tmp_path: Path
) -> None:
    world = make_world(citus_store)
    with live(world, run=run) as api:
        done = [api.create(key=f"done-{i}").body["order_id"] for i in range(3)]
        api.drive()
    world.clock.advance(91 * DAY_S)
    report = run(Pruner(citus_url, world.clock, POLICY, tmp_path).run())
    assert report is not None
    assert report.orders == 3
    archived = [d["order"]["order_id"] for p in archive_files(tmp_path) for d in archived_orders(p)]
    assert sorted(archived) == sorted(done)
    # Gone from every shard with what belongs to them; a second pass finds nothing more.
    with psycopg.connect(citus_url, autocommit=True) as conn:
        left = conn.execute(
            "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM workflow_steps)"
        ).fetchone()
    assert left == (0, 0)
    again = run(Pruner(citus_url, world.clock, POLICY, tmp_path).run())
    assert again is not None
    assert again.orders == 0


async def _orders_left_out(_pass: Any) -> None:
    """The orders' step of a pass, skipped: the test below is about the audit months and the
    keys while the orders are still there (the test above prunes them)."""


def test_prune_on_a_distributed_database_drops_audit_months_and_forgets_old_keys(
    citus_store: PgOrderStore, citus_url: str, run: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setattr(prune._Pass, "orders", _orders_left_out)
    world = make_world(citus_store)  # its clock: 2026-01-01
    with live(world, run=run) as api:
        done = [api.create(key=f"done-{i}").body["order_id"] for i in range(3)]
        api.drive()
    pruner = Pruner(citus_url, world.clock, POLICY, tmp_path)
    first = run(pruner.run())
    assert first is not None
    assert first.audit_months_created == 3  # this month's entries moved out of DEFAULT
    with psycopg.connect(citus_url, autocommit=True) as conn:
        conn.execute("DELETE FROM orders WHERE order_id = %s", (done[0],))  # as if pruned
        before = conn.execute("SELECT order_id, count(*) FROM audit_log GROUP BY 1").fetchall()
    world.clock.advance((datetime(2027, 3, 9, tzinfo=UTC) - world.clock.now()).total_seconds())
    report = run(pruner.run())
    assert report is not None
    assert report.idempotency_keys == 3  # by key, each on its own shard
    assert report.audit_months_dropped == 1
    gone = {str(order): n for order, n in before}[done[0]]
    assert report.audit_entries == gone
    with psycopg.connect(citus_url) as conn:
        after = conn.execute("SELECT order_id, count(*) FROM audit_log GROUP BY 1").fetchall()
        where = conn.execute("SELECT DISTINCT tableoid::regclass::text FROM audit_log").fetchall()
        month = conn.execute("SELECT to_regclass('audit_log_202601')").fetchone()
        coming = conn.execute(
            "SELECT count(*) FROM pg_dist_partition"
            " WHERE logicalrelid::text IN ('audit_log_202703', 'audit_log_202704')"
        ).fetchone()
    assert sorted(after) == sorted(r for r in before if str(r[0]) != done[0])
    # the kept orders' entries put back, in DEFAULT's shards
    assert {w[0].rsplit("_", 1)[0] for w in where} == {"audit_log_default"}
    assert month == (None,)
    assert coming == (2,)  # the coming months are distributed partitions too
    again = run(pruner.run())
    assert again is not None
    assert again.kinds() == dict.fromkeys(again.kinds(), 0)
    assert (again.audit_months_created, again.audit_months_dropped) == (0, 0)
