"""Stand-in for `orderflow api|worker|mocks` while the CLI is not there: wires the same pieces.

Run as `python -m bench.fallback_node ROLE`; configuration comes from the same ORDERFLOW_*
variables as the CLI. Only the harness uses it, and only when
`--launcher fallback` is chosen or `orderflow` is not installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys

from aiohttp import web

from orderflow_core import Executor, OrderService, Role, Services, SystemClock, Timing, hash_token
from orderflow_http import HttpPayments, HttpShipping, HttpWarehouse
from orderflow_http.api import create_app
from orderflow_mocks import run_mocks
from orderflow_pg import PgOrderStore, run_migrate

RELAY_BATCH = 500
RELAY_IDLE_S = 0.5


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()


async def _api() -> None:
    url = os.environ["ORDERFLOW_DATABASE_URL"]
    async with PgOrderStore.open(url, min_size=2, max_size=10) as store:
        service = OrderService(store, SystemClock(), store.users, process_version=1)
        runner = web.AppRunner(create_app(service, readiness=store.ping), access_log=None)
        await runner.setup()
        host = _env("ORDERFLOW_HTTP_HOST", "127.0.0.1")
        site = web.TCPSite(runner, host, int(_env("ORDERFLOW_HTTP_PORT", "8080")))
        await site.start()
        try:
            await _until_signalled()
        finally:
            await runner.cleanup()


async def _relay(store: PgOrderStore, clock: SystemClock, stop: asyncio.Event) -> None:
    while not stop.is_set():
        events = await store.unpublished_events(RELAY_BATCH)
        await store.mark_published([e.seq for e in events], clock.now())
        if len(events) < RELAY_BATCH:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RELAY_IDLE_S):
                    await stop.wait()


async def _worker() -> None:
    url = os.environ["ORDERFLOW_DATABASE_URL"]
    concurrency = int(_env("ORDERFLOW_MAX_CONCURRENT_STEPS", "20"))
    worker_id = _env("ORDERFLOW_WORKER_ID", f"{socket.gethostname()}:{os.getpid()}")
    clock = SystemClock()
    async with (
        PgOrderStore.open(url, min_size=2, max_size=concurrency + 5) as store,
        HttpWarehouse(os.environ["ORDERFLOW_WAREHOUSE_URL"]) as warehouse,
        HttpPayments(os.environ["ORDERFLOW_PAYMENTS_URL"]) as payments,
        HttpShipping(os.environ["ORDERFLOW_SHIPPING_URL"]) as shipping,
    ):
        executor = Executor(
            store=store,
            services=Services(warehouse, payments, shipping),
            clock=clock,
            worker_id=worker_id,
            timing=Timing(max_concurrent=concurrency),
        )
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(executor.run()),
            asyncio.create_task(_relay(store, clock, stop)),
        ]
        await _until_signalled()
        stop.set()
        await executor.stop()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _seed() -> None:
    url = os.environ["ORDERFLOW_DATABASE_URL"]
    async with PgOrderStore.open(url) as store:
        for user, role, var in (
            ("order_customer", Role.CUSTOMER, "ORDERFLOW_CUSTOMER_TOKEN"),
            ("order_operator", Role.OPERATOR, "ORDERFLOW_OPERATOR_TOKEN"),
        ):
            await store.users.upsert_user(user, role, hash_token(os.environ[var]))


def main() -> None:
    role = sys.argv[1] if len(sys.argv) > 1 else ""
    if role == "mocks":
        run_mocks(
            port=int(_env("ORDERFLOW_MOCKS_PORT", "8081")),
            latency_ms=int(_env("ORDERFLOW_MOCKS_LATENCY_MS", "0")),
        )
    elif role == "migrate":
        sys.exit(run_migrate(os.environ["ORDERFLOW_DATABASE_URL"]))
    elif role == "seed":
        asyncio.run(_seed())
    elif role in ("api", "worker"):
        asyncio.run(_api() if role == "api" else _worker())
    else:
        sys.exit("usage: python -m bench.fallback_node api|worker|mocks|migrate|seed")


if __name__ == "__main__":
    main()
