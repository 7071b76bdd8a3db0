"""Orders per second straight to PostgreSQL against through pgbouncer (transaction mode), in
one session, alternating, so both see the same machine.

    python -m bench.pooler --database-url postgresql://postgres@127.0.0.1:5432/postgres

Each run: a fresh database, `orderflow serve` (API, one worker, the simulated services in one
process) pointed at it directly or through a private pgbouncer (`bench.pgbouncer`, transaction
mode, ORDERFLOW_DATABASE_POOLER=transaction, LISTEN on ORDERFLOW_DIRECT_DATABASE_URL),
`--orders` posted by `--clients` customers in closed loop, timed from the first POST until the
last order stopped. The machine's load average is printed with each run: on a shared machine
the spread between runs of one mode says how far a difference can be trusted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import launch, load, machine, pgadmin
from bench.pgbouncer import PgBouncer

CUSTOMER_TOKEN = "bench-pooler-customer-token-0001"
OPERATOR_TOKEN = "bench-pooler-operator-token-0001"


@contextlib.contextmanager
def _served(mode: str, url: str, server_url: str, name: str) -> Iterator[tuple[launch.Node, int]]:
    api_port = launch.free_port()
    env = {
        "ORDERFLOW_DATABASE_URL": url,
        "ORDERFLOW_CUSTOMER_TOKEN": CUSTOMER_TOKEN,
        "ORDERFLOW_OPERATOR_TOKEN": OPERATOR_TOKEN,
        "ORDERFLOW_HTTP_PORT": str(api_port),
        "ORDERFLOW_MOCKS_PORT": str(launch.free_port()),
        "ORDERFLOW_PROCESS_VERSION": "1",
        "ORDERFLOW_LOG_FORMAT": "text",
    }
    if mode == "pgbouncer":
        env["ORDERFLOW_DATABASE_POOLER"] = "transaction"
        env["ORDERFLOW_DIRECT_DATABASE_URL"] = pgadmin.db_url(server_url, name)
    node = launch.Node(f"pooler-{mode}", [str(launch.cli_path() or "orderflow"), "serve"], env)
    try:
        yield node, api_port
    finally:
        node.stop()


async def _one(mode: str, server_url: str, orders: int, clients: int) -> dict[str, Any]:
    name = f"orderflow_bench_pooler_{uuid.uuid4().hex[:8]}"
    direct = pgadmin.create_database(server_url, name)
    bouncer = PgBouncer.in_front_of(direct, pool_size=20) if mode == "pgbouncer" else None
    try:
        if bouncer is not None:
            bouncer.start()
        url = bouncer.url(direct) if bouncer is not None else direct
        with _served(mode, url, server_url, name) as (node, port):
            await launch.wait_for_port(node, port, timeout_s=120)
            api = f"http://127.0.0.1:{port}"
            load_before = machine.load_average()
            expected: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            seen = load.Watch()
            started = time.monotonic()
            watcher = asyncio.create_task(load.watch(direct, expected, seen, timeout_s=600))
            posted = await load.closed_loop(api, CUSTOMER_TOKEN, orders=orders, clients=clients)
            accepted = sum(1 for p in posted if p.status == 202)
            expected.set_result(accepted)
            await watcher
            if seen.finished is None:
                raise RuntimeError(f"{mode}: the orders did not all stop within 600 s")
            elapsed = seen.finished - started
            latencies = sorted(p.latency_s for p in posted if p.status == 202)
            return {
                "mode": mode,
                "orders": accepted,
                "refused": len(posted) - accepted,
                "seconds": round(elapsed, 2),
                "orders_per_s": round(accepted / elapsed, 1),
                "post_p50_ms": round(1000 * latencies[len(latencies) // 2], 1),
                "post_p99_ms": round(1000 * latencies[int(len(latencies) * 0.99)], 1),
                "load_before": load_before,
                "load_after": machine.load_average(),
            }
    finally:
        if bouncer is not None:
            bouncer.stop()
        pgadmin.drop_database(server_url, name)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    runs = []
    for pair in range(args.pairs):
        modes = ("direct", "pgbouncer") if pair % 2 == 0 else ("pgbouncer", "direct")
        for mode in modes:
            result = await _one(mode, args.database_url, args.orders, args.clients)
            print(json.dumps(result), flush=True)
            runs.append(result)
    summary = {
        mode: {
            "runs": [r["orders_per_s"] for r in runs if r["mode"] == mode],
            "mean": round(statistics.mean(r["orders_per_s"] for r in runs if r["mode"] == mode), 1),
        }
        for mode in ("direct", "pgbouncer")
    }
    return {"runs": runs, "summary": summary, "cpus": os.cpu_count()}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.pooler", description=__doc__)
    p.add_argument("--database-url", default=os.environ.get(
        "ORDERFLOW_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"))
    p.add_argument("--orders", type=int, default=2000)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--pairs", type=int, default=2, help="direct/pgbouncer pairs, alternating")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args(argv)
    result = asyncio.run(main_async(args))
    print(json.dumps(result["summary"]))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
