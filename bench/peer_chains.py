"""A peer on the same PostgreSQL: three chained jobs (reserve → charge → ship) per order.

Runs inside bench/.peer-venv (never imported by orderflow):
    python bench/peer_chains.py pgqueuer|procrastinate DB_URL MOCKS_URL ORDERS CONCURRENCY
Each job calls the same simulated service our executor calls (same idempotency headers), then
enqueues the next job. Prints one JSON line: chains/s, chain latency percentiles.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import psycopg

ITEMS = [{"sku": "SKU-BENCH-1", "quantity": 2}, {"sku": "SKU-BENCH-2", "quantity": 1}]
ENQUEUE_BATCH = 100
TIMEOUT_S = 900.0

Next = Callable[[str, dict[str, Any]], Awaitable[None]]


class Chains:
    """The three job bodies, the HTTP session, and the finish line."""

    def __init__(self, mocks: str, orders: int) -> None:
        self.mocks = mocks.rstrip("/")
        self.orders = orders
        self.session: aiohttp.ClientSession | None = None
        self.latencies: list[float] = []
        self.finished = asyncio.Event()
        self.failures = 0
        self.started = 0.0  # first enqueue
        self.finished_at = 0.0  # last ship job done

    async def call(self, path: str, body: dict[str, Any], order: str, step: str) -> None:
        assert self.session is not None
        headers = {"Idempotency-Key": f"{order}:{step}", "X-Order-Id": order, "X-Step-Id": step}
        async with self.session.post(f"{self.mocks}{path}", json=body, headers=headers) as resp:
            await resp.read()
            if resp.status >= 300:
                self.failures += 1

    async def step(self, kind: str, args: dict[str, Any], enqueue: Next) -> None:
        order = args["order_id"]
        if kind == "reserve":
            await self.call("/warehouse/v1/reservations", {"order_id": order, "items": ITEMS},
                            order, "reserve")
            await enqueue("charge", args)
        elif kind == "charge":
            await self.call("/payments/v1/charges",
                            {"order_id": order, "amount_minor": 52900, "currency": "RUB"},
                            order, "charge")
            await enqueue("ship", args)
        else:
            await self.call("/shipping/v1/shipments", {"order_id": order, "items": ITEMS},
                            order, "ship")
            self.latencies.append(time.time() - args["t0"])
            if len(self.latencies) >= self.orders and not self.finished.is_set():
                self.finished_at = time.time()
                self.finished.set()


def _batches(chains: Chains) -> list[list[dict[str, Any]]]:
    chains.started = time.time()
    orders = chains.orders
    ids = [str(uuid.uuid4()) for _ in range(orders)]
    return [[{"order_id": i} for i in ids[k:k + ENQUEUE_BATCH]]
            for k in range(0, orders, ENQUEUE_BATCH)]


async def run_pgqueuer(url: str, chains: Chains, concurrency: int) -> None:
    from pgqueuer import PsycopgDriver, QueueManager
    from pgqueuer.models import Job
    from pgqueuer.queries import Queries

    async with (
        await psycopg.AsyncConnection.connect(url, autocommit=True) as conn,
        await psycopg.AsyncConnection.connect(url, autocommit=True) as producer_conn,
    ):
        await Queries(PsycopgDriver(conn)).install()
        qm = QueueManager(PsycopgDriver(conn))

        async def enqueue(kind: str, args: dict[str, Any]) -> None:
            await qm.queries.enqueue(kind, json.dumps(args).encode())

        for kind in ("reserve", "charge", "ship"):
            async def body(job: Job, kind: str = kind) -> None:
                await chains.step(kind, json.loads(job.payload or b"{}"), enqueue)
            qm.entrypoint(kind)(body)

        producer = Queries(PsycopgDriver(producer_conn))

        async def produce() -> None:
            for batch in _batches(chains):
                now = time.time()
                payloads = [json.dumps({**a, "t0": now}).encode() for a in batch]
                await producer.enqueue(["reserve"] * len(batch), payloads, [0] * len(batch))

        async def stop_when_done() -> None:
            await chains.finished.wait()
            qm.shutdown.set()

        await asyncio.gather(
            produce(),
            stop_when_done(),
            qm.run(batch_size=concurrency // 2, max_concurrent_tasks=concurrency),
        )


async def run_procrastinate(url: str, chains: Chains, concurrency: int) -> None:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
    tasks: dict[str, Any] = {}

    async def enqueue(kind: str, args: dict[str, Any]) -> None:
        await tasks[kind].defer_async(**args)

    for kind in ("reserve", "charge", "ship"):
        async def body(kind: str = kind, **args: Any) -> None:
            await chains.step(kind, args, enqueue)
        tasks[kind] = app.task(name=kind)(body)

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        worker = asyncio.create_task(
            app.run_worker_async(concurrency=concurrency, install_signal_handlers=False)
        )
        for batch in _batches(chains):
            now = time.time()
            await tasks["reserve"].batch_defer_async(*({**a, "t0": now} for a in batch))
        await chains.finished.wait()
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)


def _pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1] * 1000, 1)


async def main(system: str, url: str, mocks: str, orders: int, concurrency: int) -> None:
    chains = Chains(mocks, orders)
    runner = run_pgqueuer if system == "pgqueuer" else run_procrastinate
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100)) as session:
        chains.session = session
        async with asyncio.timeout(TIMEOUT_S):
            await runner(url, chains, concurrency)
    elapsed = chains.finished_at - chains.started
    print(json.dumps({
        "system": system,
        "orders": orders,
        "chains_done": len(chains.latencies),
        "call_failures": chains.failures,
        "elapsed_s": round(elapsed, 2),
        "chains_per_s": round(len(chains.latencies) / elapsed, 1),
        "chain_latency_ms": {f"p{p}": _pct(chains.latencies, p) for p in (50, 95, 99)},
    }))


if __name__ == "__main__":
    sysname, db, mocks_url, n, conc = sys.argv[1:6]
    asyncio.run(main(sysname, db, mocks_url, int(n), int(conc)))
