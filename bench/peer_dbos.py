"""The durable-workflow peer on the same PostgreSQL: DBOS Transact, one workflow per order.

Runs inside bench/.peer-venv (never imported by orderflow):
    python bench/peer_dbos.py DB_URL MOCKS_URL ORDERS CONCURRENCY POLLING_S MODE ENQUEUE_BATCH
One DBOS workflow per order, with three `@DBOS.step` functions (reserve → charge → ship) making
the same HTTP calls to the simulated services as bench/peer_chains.py (same paths, bodies and
idempotency headers), started through a DBOS queue with `worker_concurrency` CONCURRENCY and
`polling_interval_sec` POLLING_S (DBOS's default is 1 s). DBOS records each workflow's start,
each step's output and the workflow's end in its system tables: the same durability as our
executor's (a step that finished is not called again after a crash).

MODE `async`: async workflow and steps, run by DBOS on its event loop (aiohttp for the calls, as
the job queues). MODE `sync`: DBOS's own threads run sync workflows and steps; a step's call is
handed to the main thread's event loop (the same aiohttp client as every other peer) and waited
for.
ENQUEUE_BATCH > 1: the orders are enqueued that many per transaction (DBOS's client enqueues
inside a transaction the caller owns), as the job queues enqueue theirs 100 at a time; 1: one
enqueue (one transaction) per order.
Prints `{"load": "start"}` before the first enqueue and `{"load": "end"}` when the last
workflow finished (the bench reads the processes' CPU at both), then one JSON line of figures.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import threading
import time
import uuid
from typing import Any

import aiohttp
import sqlalchemy as sa
from dbos import DBOS, DBOSClient, DBOSConfig, EnqueueOptions


def _cpu_s() -> float:
    """This process's CPU so far (all its threads), for the bench's load markers."""
    t = os.times()
    return t.user + t.system


ITEMS = [{"sku": "SKU-BENCH-1", "quantity": 2}, {"sku": "SKU-BENCH-2", "quantity": 1}]
TIMEOUT_S = 900.0
QUEUE = "orders"


class Calls:
    """The aiohttp session (on the loop that owns it) and the finish line."""

    def __init__(self) -> None:
        self.mocks = ""
        self.orders = 0
        # One session per event loop: DBOS runs async workflows on an event loop of its own.
        self.sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.latencies: list[float] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.failures = 0
        self.finished_at = 0.0

    async def post(self, step: str, path: str, body: dict[str, Any], order: str) -> int:
        loop = asyncio.get_running_loop()
        session = self.sessions.get(loop)
        if session is None:
            session = self.sessions[loop] = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=100))
        headers = {"Idempotency-Key": f"{order}:{step}", "X-Order-Id": order, "X-Step-Id": step}
        async with session.post(f"{self.mocks}{path}", json=body, headers=headers) as resp:
            await resp.read()
            if resp.status >= 300:
                self.failures += 1
            return resp.status

    def post_from_thread(self, step: str, path: str, body: dict[str, Any], order: str) -> int:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(
            self.post(step, path, body, order), self.loop).result(timeout=60)

    def finish(self, t0: float) -> None:
        with self.lock:
            self.latencies.append(time.time() - t0)
            if len(self.latencies) >= self.orders and not self.done.is_set():
                self.finished_at = time.time()
                print(json.dumps({"load": "end", "cpu_s": _cpu_s()}), flush=True)
                self.done.set()


CALLS = Calls()  # its mocks and orders are set in main, before DBOS launches
RESERVE = ("reserve", "/warehouse/v1/reservations")
CHARGE = ("charge", "/payments/v1/charges")
SHIP = ("ship", "/shipping/v1/shipments")


def _items(order: str) -> dict[str, Any]:
    return {"order_id": order, "items": ITEMS}


def _amount(order: str) -> dict[str, Any]:
    return {"order_id": order, "amount_minor": 52900, "currency": "RUB"}


# Async mode: workflow and steps are coroutines on the main event loop.
@DBOS.step()
async def reserve_async(order: str) -> int:
    return await CALLS.post(*RESERVE, _items(order), order)


@DBOS.step()
async def charge_async(order: str) -> int:
    return await CALLS.post(*CHARGE, _amount(order), order)


@DBOS.step()
async def ship_async(order: str) -> int:
    return await CALLS.post(*SHIP, _items(order), order)


@DBOS.workflow()
async def order_async(order: str, t0: float) -> None:
    await reserve_async(order)
    await charge_async(order)
    await ship_async(order)
    CALLS.finish(t0)


# Sync mode: DBOS runs workflow and steps in its threads; the calls go to the aiohttp loop.
@DBOS.step()
def reserve_sync(order: str) -> int:
    return CALLS.post_from_thread(*RESERVE, _items(order), order)


@DBOS.step()
def charge_sync(order: str) -> int:
    return CALLS.post_from_thread(*CHARGE, _amount(order), order)


@DBOS.step()
def ship_sync(order: str) -> int:
    return CALLS.post_from_thread(*SHIP, _items(order), order)


@DBOS.workflow()
def order_sync(order: str, t0: float) -> None:
    reserve_sync(order)
    charge_sync(order)
    ship_sync(order)
    CALLS.finish(t0)


def _pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1] * 1000, 1)


def _enqueue_batches(url: str, flow: str, ids: list[str], batch: int) -> None:
    """`batch` workflows per transaction, through DBOS's client (its enqueue inside a
    transaction the caller owns), as the job queues enqueue their first jobs 100 at a time."""
    engine = sa.create_engine(sa.make_url(url).set(drivername="postgresql+psycopg"))
    client = DBOSClient(system_database_url=url)
    options: EnqueueOptions = {"queue_name": QUEUE, "workflow_name": flow}
    try:
        for k in range(0, len(ids), batch):
            with engine.begin() as conn:
                now = time.time()
                for order in ids[k:k + batch]:
                    client.enqueue_in_transaction(conn, options, order, now)
    finally:
        client.destroy()
        engine.dispose()


async def main(url: str, mocks: str, orders: int, concurrency: int, polling_s: float,
               mode: str, enqueue_batch: int) -> None:
    CALLS.mocks, CALLS.orders = mocks.rstrip("/"), orders
    config: DBOSConfig = {
        "name": "orderflow-bench",
        "system_database_url": url,
        "run_admin_server": False,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    CALLS.loop = asyncio.get_running_loop()
    try:
        await asyncio.to_thread(DBOS.launch)
        queue = await DBOS.register_queue_async(
            QUEUE, worker_concurrency=concurrency, polling_interval_sec=polling_s)
        flow: Any = order_async if mode == "async" else order_sync
        ids = [str(uuid.uuid4()) for _ in range(orders)]
        print(json.dumps({"load": "start", "cpu_s": _cpu_s()}), flush=True)
        started = time.time()
        if enqueue_batch > 1:
            await asyncio.to_thread(_enqueue_batches, url, flow.__qualname__, ids, enqueue_batch)
        elif mode == "async":
            for order in ids:
                await queue.enqueue_async(flow, order, time.time())
        else:
            await asyncio.to_thread(lambda: [queue.enqueue(flow, o, time.time()) for o in ids])
        if not await asyncio.to_thread(CALLS.done.wait, TIMEOUT_S):
            raise TimeoutError(f"{len(CALLS.latencies)} of {orders} done in {TIMEOUT_S:g} s")
    finally:
        await asyncio.to_thread(DBOS.destroy)
    elapsed = CALLS.finished_at - started
    print(json.dumps({
        "system": f"dbos-{mode}",
        "orders": orders,
        "polling_interval_s": polling_s,
        "mode": mode,
        "enqueue_batch": enqueue_batch,
        "chains_done": len(CALLS.latencies),
        "call_failures": CALLS.failures,
        "elapsed_s": round(elapsed, 2),
        "chains_per_s": round(len(CALLS.latencies) / elapsed, 1),
        "chain_latency_ms": {f"p{p}": _pct(CALLS.latencies, p) for p in (50, 95, 99)},
    }), flush=True)


if __name__ == "__main__":
    db, mocks_url, n, conc, polling, how, batch = sys.argv[1:8]
    asyncio.run(main(db, mocks_url, int(n), int(conc), float(polling), how, int(batch)))
