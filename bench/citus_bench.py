"""`python -m bench --citus`: the standard closed-loop load on a local Citus cluster (a
coordinator and 2 workers, `orderflow migrate --distribute`) beside the same load on one
server of the same build, both started under /tmp by orderflow_pg/local_citus.py.

Per run: orders/s, statements per order (the processes' own counters), distributed
two-phase transactions per order, and per node the tuples written and the WAL.

Two-phase transactions are counted as rows of the coordinator's `pg_dist_transaction`: Citus
writes one per node a transaction PREPAREs on, and its recovery would delete them, so the
cluster is run with `citus.recover_2pc_interval = -1` (recovery off) for the measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import aiohttp
import psycopg

from bench import launch, load, machine, scenario, statements
from orderflow_pg import local_citus as citus

DBNAME = "orderflow_bench"
NODE_FIGURES = (
    "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn,"
    " (SELECT tup_inserted + tup_updated + tup_deleted FROM pg_stat_database"
    "  WHERE datname = current_database())"
)
PREPARED = "SELECT groupid, count(*) FROM pg_dist_transaction GROUP BY groupid"


def _node(url: str) -> tuple[int, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(NODE_FIGURES).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _prepared(url: str) -> dict[int, int]:
    """Prepared transactions so far, by node group (0: the coordinator); none without Citus."""
    with psycopg.connect(url, autocommit=True) as conn:
        return {int(g): int(n) for g, n in conn.execute(PREPARED).fetchall()}


async def _sent(urls: list[str]) -> Counter[str]:
    """The statement counters of the processes at `urls`; a process that sent none yet counts
    as zero (statements.read would give up on it)."""
    total: Counter[str] = Counter()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        for url in urls:
            async with session.get(f"{url}/metrics") as reply:
                total += statements.parse(await reply.text())
    return total


def _distributed(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_dist_partition WHERE logicalrelid = 'orders'::regclass"
        ).fetchone()
    return row == (1,)


def _migrate(env: dict[str, str], *, distribute: bool) -> None:
    """`orderflow migrate`, with `--distribute` on the cluster (32 shards, the default)."""
    migrate = ["migrate", "--distribute"] if distribute else ["migrate"]
    subprocess.run([sys.executable, "-m", "orderflow", *migrate],
                   env={**launch.node_env(env), "ORDERFLOW_CITUS_SHARD_COUNT": "32"},
                   check=True, capture_output=True, timeout=600)


async def _measure(
    cluster: citus.Cluster, name: str, *, distribute: bool, orders: int, clients: int,
    concurrency: int, workers: int, launcher: str,
) -> dict[str, Any]:
    url = cluster.create_database(DBNAME)
    if distribute:  # recovery off: pg_dist_transaction keeps a row per PREPARE
        with psycopg.connect(cluster.url(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET citus.recover_2pc_interval = -1")
            conn.execute("SELECT pg_reload_conf()")
    setup = scenario.Setup(
        launcher=launcher, server_url=cluster.url(), template="", db_prefix="",
        customer_token=secrets.token_urlsafe(24), operator_token=secrets.token_urlsafe(24),
        concurrency=concurrency, clients=clients, timeout_s=600.0,
    )
    env = {"ORDERFLOW_DATABASE_URL": url, "ORDERFLOW_CUSTOMER_TOKEN": setup.customer_token,
           "ORDERFLOW_OPERATOR_TOKEN": setup.operator_token}
    await asyncio.to_thread(_migrate, env, distribute=distribute)
    if _distributed(url) != distribute:
        raise SystemExit(f"{name}: orders distributed is not {distribute}")
    launch.run_once(launcher, "seed", env)
    node_urls = {("coordinator" if p == cluster.coordinator else f"worker:{p}"):
                 cluster.url(DBNAME, p) for p in cluster.ports}
    with scenario._started(setup, name, url, 0, workers) as nodes:
        await launch.wait_for_port(nodes.mocks, nodes.mocks_port)
        await launch.wait_for_port(nodes.api, nodes.api_port)
        if launcher == "cli":  # each worker's /metrics: it is up (as bench/scenario.py waits)
            for worker, port in zip(nodes.workers, nodes.worker_metrics_ports, strict=True):
                await launch.wait_for_port(worker, port)
        await asyncio.sleep(scenario.SETTLE_S)
        before = {n: _node(u) for n, u in node_urls.items()}
        prepared_before = _prepared(url)
        sent_start = await _sent(nodes.metrics_urls)
        began = time.monotonic()
        expected: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        seen = load.Watch()
        watcher = asyncio.create_task(load.watch(url, expected, seen, timeout_s=600.0))
        posted = await load.closed_loop(nodes.api_url, setup.customer_token, orders=orders,
                                        clients=clients)
        accepted = sum(1 for p in posted if p.status == 202)
        expected.set_result(accepted)
        await watcher
        elapsed = (seen.finished or time.monotonic()) - began
        sent_end = await _sent(nodes.metrics_urls)
        prepared_after = _prepared(url)
    # The processes are gone: every backend has flushed its statistics.
    await asyncio.sleep(1.5)
    after = {n: _node(u) for n, u in node_urls.items()}
    outcome = await load.outcome_counts(url)
    shipped = outcome["states"].get("shipped", 0)
    per = max(accepted, 1)
    figures: dict[str, Any] = {
        "run": name, "orders_accepted": accepted, "states": outcome["states"],
        "orders_per_s": round(shipped / elapsed, 1) if elapsed > 0 else None,
        "two_phase_per_order": round(
            (sum(prepared_after.values()) - sum(prepared_before.values())) / per, 2),
        "two_phase_by_group_per_order": {
            g: round((n - prepared_before.get(g, 0)) / per, 2) for g, n in prepared_after.items()},
        "nodes": {n: {"wal_kib_per_order": round((after[n][0] - before[n][0]) / 1024 / per, 2),
                      "tuples_per_order": round((after[n][1] - before[n][1]) / per, 1)}
                  for n in node_urls},
    }
    figures.update(statements.per_order(sent_start, sent_end, accepted))
    return figures


def _say(f: dict[str, Any]) -> None:
    nodes = ", ".join(f"{n} {v['tuples_per_order']} tuples {v['wal_kib_per_order']} KiB WAL"
                      for n, v in f["nodes"].items())
    print(f"  {f['run']}: {f['orders_per_s']} orders/s, {f['statements_per_order']} "
          f"statements/order, {f['two_phase_per_order']} 2PC/order "
          f"{f['two_phase_by_group_per_order']} by group; per order: {nodes}; "
          f"states {f['states']}", flush=True)
    print(f"    statements by name per order: {f.get('statements_by_name_per_order')}", flush=True)


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    missing = citus.citus_missing()
    if missing is not None:
        raise SystemExit(f"--citus: {missing}")
    launcher = launch.choose_launcher(args.launcher)
    print(f"load average at start: {machine.load_average()}", flush=True)
    common = {"orders": args.orders, "clients": args.clients, "concurrency": args.concurrency,
              "workers": 1, "launcher": launcher}
    results = []
    for name, workers, distribute in (("one server", 0, False), ("citus 1+2", 2, True)):
        print(f"{name}: {args.orders} orders, mocks 0 ms, 1 worker", flush=True)
        with citus.running(workers=workers) as cluster:
            figures = await _measure(cluster, name, distribute=distribute, **common)
        _say(figures)
        results.append(figures)
    print(f"load average at end: {machine.load_average()}", flush=True)
    return results
