"""A database in steady state: finished orders already in it, vacuumed and analyzed.

A running service's database holds the orders it finished, and autovacuum keeps its statistics
current, so PostgreSQL plans (and caches generic plans) for tables of that size. A fresh
database plans for empty tables, and on a server without autovacuum keeps those plans: the
numbers measured on it are a young database's. `fill` runs orders through the real path
(`OrderService` to create them, one in-process `Executor` with the real HTTP clients against the
simulated services in a subprocess) until every one is shipped, publishes their events (the
relay without a sink, as a running service has), then `VACUUM (ANALYZE)`.

`Filled.since` is the newest instant any filled order was touched: what the bench measures
afterwards is what was created after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import nullcontext
from datetime import datetime
from typing import Any

import attrs
import psycopg

from bench import launch
from orderflow_core import Executor, OrderService, Role, Services, SystemClock, Timing
from orderflow_core.model import Item, Principal
from orderflow_core.relay import OutboxRelay
from orderflow_http import HttpPayments, HttpShipping, HttpWarehouse
from orderflow_http.api.metrics import traced_request
from orderflow_pg import PgOrderStore

CUSTOMER = Principal("bench", Role.CUSTOMER)
POLL_S = 0.05
RELAY_BATCH = 500

SHIPPED = "SELECT count(*) FROM orders WHERE state = 'shipped'"
LIVE_STEPS = (
    "SELECT count(*) FROM workflow_steps WHERE status IN ('pending', 'retry_scheduled', 'running')"
)
NEWEST_TOUCH = "SELECT max(updated_at) FROM orders"
UNPUBLISHED = "SELECT count(*) FROM outbox WHERE seq > (SELECT published_through FROM outbox_feed)"


@attrs.frozen
class Filled:
    orders: int
    since: datetime | None  # the newest filled order's last change (None: nothing filled)


async def create_orders(
    store: PgOrderStore, orders: int, observer: Any = None, *, key_prefix: str = "key"
) -> None:
    """Orders ready to run, created through `OrderService`; with telemetry on, each under a
    request span the way the API's middleware makes one (`traced_request`: the order keeps its
    trace context, sampled or not, and its steps' spans link it and follow its sampling
    decision)."""
    service = OrderService(store, SystemClock(), store.users, process_version=1)
    gate = asyncio.Semaphore(10)
    traced = observer is not None and observer.tracer is not None

    async def one(i: int) -> None:
        scope = traced_request(observer, "POST", "/api/v1/orders", {}) if traced else nullcontext()
        async with gate:
            with scope as seen:
                await service.create_order(
                    CUSTOMER, f"{key_prefix}-{i}", [Item("SKU-1", 1, 100)], "RUB"
                )
                if seen is not None:
                    seen.finished("202")

    await asyncio.gather(*(one(i) for i in range(orders)))


class Mocks:
    """The simulated services in a subprocess on a free port, for as long as the block runs,
    answering after `latency_ms`; the block starts once they listen."""

    READY_S = 30.0

    def __init__(self, latency_ms: int = 0) -> None:
        self._latency_ms = int(latency_ms)

    def __enter__(self) -> str:
        port = launch.free_port()
        code = (
            "from orderflow_mocks import run_mocks; "
            f"run_mocks(port={port}, latency_ms={self._latency_ms})"
        )
        self._process = subprocess.Popen(  # once, before anything is measured
            [sys.executable, "-c", code], stdout=subprocess.DEVNULL
        )
        try:
            self._wait_listening(port)
        except BaseException:
            self.__exit__()
            raise
        return f"http://127.0.0.1:{port}"

    def _wait_listening(self, port: int) -> None:
        deadline = time.monotonic() + self.READY_S
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"the simulated services exited ({self._process.returncode})")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the simulated services did not listen within {self.READY_S:g} s"
                    ) from None
                time.sleep(0.05)  # polling for the port, with a deadline

    def __exit__(self, *exc: object) -> None:
        self._process.terminate()
        self._process.wait(timeout=10)


@contextlib.asynccontextmanager
async def chaining_executor(
    store: PgOrderStore, base: str, concurrency: int, worker_id: str, observer: Any = None
) -> AsyncIterator[Executor]:
    """An executor with the real HTTP clients of the simulated services at `base`, chaining
    steps (as the worker runs by default)."""
    async with (
        HttpWarehouse(base, telemetry=observer) as warehouse,
        HttpPayments(base, telemetry=observer) as payments,
        HttpShipping(base, telemetry=observer) as shipping,
    ):
        yield Executor(
            store=store,
            services=Services(warehouse, payments, shipping),
            clock=SystemClock(),
            worker_id=worker_id,
            timing=Timing(max_concurrent=concurrency, chain_steps=True),
            **({"observer": observer} if observer is not None else {}),
        )


async def count(conn: psycopg.AsyncConnection[Any], query: str) -> int:
    row = await (await conn.execute(query)).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


async def fill(url: str, orders: int, *, concurrency: int = 20, timeout_s: float = 900.0) -> Filled:
    """`orders` orders created and run to `shipped` in the database at `url` (migrated), their
    events published, then `VACUUM (ANALYZE)`; raises if they do not all ship within
    `timeout_s`."""
    if orders <= 0:
        return Filled(0, None)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    with Mocks() as base:
        async with PgOrderStore.open(url, min_size=2, max_size=concurrency + 10) as store:
            await create_orders(store, orders, key_prefix="prefill")
            async with chaining_executor(store, base, concurrency, "bench-prefill") as executor:
                running = asyncio.create_task(executor.run())
                try:
                    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                        while await count(conn, SHIPPED) < orders:
                            if loop.time() > deadline:
                                raise RuntimeError(f"prefill: not all {orders} orders shipped")
                            await asyncio.sleep(POLL_S)  # the bench's own poll, not a test wait
                finally:
                    await executor.stop()
                    await running
            # A running service's relay has published its events: without this, the first
            # worker of every run would spend its first seconds publishing the filled ones.
            relay = OutboxRelay(store, SystemClock(), sink=None, batch=RELAY_BATCH)
            while await relay.run_once():
                pass
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        if live := await count(conn, LIVE_STEPS):
            raise RuntimeError(f"prefill left {live} live steps behind")
        if unpublished := await count(conn, UNPUBLISHED):
            raise RuntimeError(f"prefill left {unpublished} events unpublished")
        await conn.execute("VACUUM (ANALYZE)")
        row = await (await conn.execute(NEWEST_TOUCH)).fetchone()
    return Filled(orders, row[0] if row else None)
