"""Wiring: which adapters each command starts, and how they stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager

import psycopg
from aiohttp import web
from psycopg import sql

from orderflow.config import Settings
from orderflow_core import Executor, OrderService, Services, SystemClock
from orderflow_core.observe import NULL_OBSERVER
from orderflow_core.relay import EventSink, OutboxRelay
from orderflow_core.token_cache import CachedUsers
from orderflow_http import Bulkhead, HttpPayments, HttpShipping, HttpWarehouse
from orderflow_http.api import create_app
from orderflow_http.api.metrics import metrics_app
from orderflow_http.telemetry import Telemetry
from orderflow_http.webhook import WebhookSink
from orderflow_mocks import running_mocks
from orderflow_pg import PgOrderStore, start_embedded, stop_embedded
from orderflow_pg.probes import PgProbe

log = logging.getLogger("orderflow")
STEPS_CHANNEL = "orderflow_steps"


@asynccontextmanager
async def database_url(settings: Settings) -> AsyncIterator[str]:
    """The configured database, or the embedded one under ORDERFLOW_HOME for the block."""
    if settings.database_url:
        yield settings.database_url
        return
    url = await asyncio.to_thread(start_embedded, settings.home)
    try:
        yield url
    finally:
        await asyncio.to_thread(stop_embedded, settings.home)


@asynccontextmanager
async def open_store(url: str, settings: Settings) -> AsyncIterator[PgOrderStore]:
    """A pool sized for the executor's concurrency plus the API."""
    size = settings.timing.max_concurrent + 10
    async with PgOrderStore.open(url, min_size=2, max_size=size) as store:
        yield store


def make_telemetry(
    settings: Settings, store: PgOrderStore, *, database_gauges: bool = True
) -> Telemetry:
    """The process's metrics and tracer (ORDERFLOW_METRICS, ORDERFLOW_TRACING). The gauges of
    the whole database (outbox age, orders waiting) are read by the processes serving the API
    only, so that summing over workers does not count them twice."""
    probe = PgProbe(store, SystemClock())
    return Telemetry(
        metrics=settings.metrics,
        tracing=settings.tracing,
        probe=probe if database_gauges else None,
        pool_stats=probe.pool_stats,
    )


@asynccontextmanager
async def serving_metrics(settings: Settings, telemetry: Telemetry) -> AsyncIterator[str | None]:
    """A worker's /metrics on ORDERFLOW_HTTP_HOST:ORDERFLOW_METRICS_PORT (0: none); yields its
    base URL."""
    if settings.metrics_port == 0 or not telemetry.serves_metrics:
        yield None
        return
    runner = web.AppRunner(metrics_app(telemetry), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, settings.http_host, settings.metrics_port)
        await site.start()
        yield f"http://{settings.http_host}:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def outbound_services(
    settings: Settings, simulated_url: str | None = None, telemetry: Telemetry | None = None
) -> AsyncIterator[Services]:
    """HTTP clients of the three services, each behind its own bulkhead; a service without a
    configured URL goes to `simulated_url` (the built-in simulated services)."""
    async with AsyncExitStack() as stack:
        clients = []
        for cls, url in (
            (HttpWarehouse, settings.warehouse_url),
            (HttpPayments, settings.payments_url),
            (HttpShipping, settings.shipping_url),
        ):
            bulkhead = Bulkhead(settings.bulkhead_limit, settings.bulkhead_policy)  # type: ignore[arg-type]
            client = cls(
                settings.service_url(url),
                bulkhead=bulkhead,
                timeout_s=settings.timing.call_timeout_s,
                connection_limit=settings.bulkhead_limit,
                telemetry=telemetry,
            )
            clients.append(await stack.enter_async_context(client))
        warehouse, payments, shipping = clients
        yield Services(warehouse, payments, shipping)  # type: ignore[arg-type]


@asynccontextmanager
async def simulated_services_if_needed(settings: Settings) -> AsyncIterator[str | None]:
    """Start the built-in simulated services unless all three URLs are configured."""
    if settings.external_services:
        yield None
        return
    async with running_mocks(
        "127.0.0.1",
        settings.mocks_port,
        latency_ms=settings.mocks_latency_ms,
        hold_s=settings.mocks_hold_s,
    ) as mocks:
        yield mocks.url


@asynccontextmanager
async def serving_api(
    store: PgOrderStore, settings: Settings, telemetry: Telemetry | None = None
) -> AsyncIterator[str]:
    """The REST API on ORDERFLOW_HTTP_HOST:PORT; yields its base URL."""
    clock = SystemClock()
    users = CachedUsers(store.users, clock, ttl_s=settings.token_cache_s)
    service = OrderService(store, clock, users, timing=settings.timing)

    async def ready() -> bool:
        return await store.ping() and await store.migrations_current()

    app = create_app(service, readiness=ready, telemetry=telemetry)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, settings.http_host, settings.http_port)
        await site.start()
        port = runner.addresses[0][1]
        yield f"http://{settings.http_host}:{port}"
    finally:
        await runner.cleanup()


async def run_workers(
    store: PgOrderStore,
    services: Services,
    settings: Settings,
    url: str,
    stop: asyncio.Event,
    telemetry: Telemetry | None = None,
) -> None:
    """An executor, the outbox relay and a LISTEN wake-up, until `stop`; then a graceful end."""
    clock = SystemClock()
    executor = Executor(
        store=store,
        services=services,
        clock=clock,
        worker_id=settings.worker_id,
        timing=settings.timing,
        observer=telemetry or NULL_OBSERVER,
    )
    sink: EventSink | None = None
    async with AsyncExitStack() as stack:
        if settings.webhook_url:
            sink = await stack.enter_async_context(WebhookSink(settings.webhook_url))
        relay = OutboxRelay(
            store,
            clock,
            sink=sink,
            retry=settings.timing.retry,
            observer=telemetry or NULL_OBSERVER,
        )
        tasks = [
            asyncio.create_task(executor.run(), name="executor"),
            asyncio.create_task(
                _every(settings.timing.poll_interval_s, relay.run_once, stop), name="relay"
            ),
            asyncio.create_task(_listen(url, executor.wake, stop), name="listen"),
        ]
        await stop.wait()
        await executor.stop(settings.shutdown_grace_s)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await relay.run_once()  # hand on what the last steps committed


async def _every(
    interval_s: float, work: Callable[[], Awaitable[object]], stop: asyncio.Event
) -> None:
    while not stop.is_set():
        try:
            await work()
        except Exception:
            log.exception("background work failed; trying again")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval_s):
                await stop.wait()


async def _listen(url: str, wake: Callable[[], None], stop: asyncio.Event) -> None:
    """Wake the executor on every NOTIFY of a new due step; reconnect on failure."""
    while not stop.is_set():
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(STEPS_CHANNEL)))
                async for _ in conn.notifies():
                    wake()
        except (psycopg.Error, OSError) as exc:
            log.warning("LISTEN connection lost (%s); polling meanwhile", exc)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await stop.wait()
