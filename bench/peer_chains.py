"""A peer on the same PostgreSQL: three chained jobs (reserve → charge → ship) per order.

Runs inside bench/.peer-venv (never imported by orderflow):
    python bench/peer_chains.py SYSTEM DB_URL MOCKS_URL ORDERS CONCURRENCY
with SYSTEM one of pgqueuer (psycopg driver), pgqueuer-asyncpg, procrastinate.
Each job calls the same simulated service our executor calls (same idempotency headers), then
enqueues the next job. Prints `{"load": "start"}` before the first enqueue and `{"load": "end"}`
when the last chain is done (the bench reads the processes' CPU at both), then one JSON line:
chains/s, chain latency percentiles.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import asyncpg
import procrastinate
import psycopg
from pgqueuer import AsyncpgDriver, PsycopgDriver, QueueManager
from pgqueuer.models import Job
from pgqueuer.queries import Queries


def _cpu_s() -> float:
    """This process's CPU so far (all its threads), for the bench's load markers."""
    t = os.times()
    return t.user + t.system


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
                print(json.dumps({"load": "end", "cpu_s": _cpu_s()}), flush=True)


def _batches(chains: Chains) -> list[list[dict[str, Any]]]:
    print(json.dumps({"load": "start", "cpu_s": _cpu_s()}), flush=True)  # the bench reads CPU
    chains.started = time.time()
    orders = chains.orders
    ids = [str(uuid.uuid4()) for _ in range(orders)]
    return [[{"order_id": i} for i in ids[k:k + ENQUEUE_BATCH]]
            for k in range(0, orders, ENQUEUE_BATCH)]


@contextlib.asynccontextmanager
async def _pgqueuer_driver(url: str, driver: str) -> AsyncIterator[Any]:
    if driver == "asyncpg":
        conn = await asyncpg.connect(url)
        try:
            yield AsyncpgDriver(conn)
        finally:
            await conn.close()
    else:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as pconn:
            yield PsycopgDriver(pconn)


async def run_pgqueuer(url: str, chains: Chains, concurrency: int, driver: str) -> None:
    async with (
        _pgqueuer_driver(url, driver) as worker_driver,
        _pgqueuer_driver(url, driver) as producer_driver,
    ):
        await Queries(worker_driver).install()
        qm = QueueManager(Queries(worker_driver))
        # The worker's connection also waits for NOTIFYs; enqueues get their own connection.
        producer = Queries(producer_driver)

        async def enqueue(kind: str, args: dict[str, Any]) -> None:
            await producer.enqueue(kind, json.dumps(args).encode())

        for kind in ("reserve", "charge", "ship"):
            async def body(job: Job, kind: str = kind) -> None:
                await chains.step(kind, json.loads(job.payload or b"{}"), enqueue)
            qm.entrypoint(kind)(body)

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
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=url, min_size=concurrency // 2, max_size=concurrency + 5
    ))
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
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100)) as session:
        chains.session = session
        async with asyncio.timeout(TIMEOUT_S):
            if system.startswith("pgqueuer"):
                driver = "asyncpg" if system.endswith("asyncpg") else "psycopg"
                await run_pgqueuer(url, chains, concurrency, driver)
            else:
                await run_procrastinate(url, chains, concurrency)
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
