"""Wiring: which adapters each command starts, and how they stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime, timedelta
from typing import Protocol

import attrs
from aiohttp import web

from orderflow import DISTRIBUTION
from orderflow.config import (
    RELAY_BATCH_S,
    ConfigError,
    NatsSettings,
    Settings,
    embedded_database_exists,
)
from orderflow.startup import StartupError, check_database, listen_error
from orderflow_core import Executor, OrderService, Services, SystemClock
from orderflow_core.errors import StoreUnavailable
from orderflow_core.model import OutboxEvent
from orderflow_core.observe import NULL_OBSERVER
from orderflow_core.outcomes import Outcome, Succeeded
from orderflow_core.ports import OrderStore, UnitOfWork, Users, WakeUps
from orderflow_core.relay import AllSinks, EventSink, OutboxFeed, OutboxRelay
from orderflow_core.token_cache import CachedUsers
from orderflow_http import (
    Bulkhead,
    HttpNotifications,
    HttpPayments,
    HttpService,
    HttpShipping,
    HttpWarehouse,
)
from orderflow_http.api import create_app
from orderflow_http.api.metrics import metrics_app
from orderflow_http.api.server import ServerLimits, serving
from orderflow_http.telemetry import Telemetry
from orderflow_http.webhook import WebhookSink
from orderflow_mocks import running_mocks
from orderflow_mocks.journal import JournalError
from orderflow_pg import PgOrderStore, start_embedded, stop_embedded
from orderflow_pg.probes import PgProbe
from orderflow_pg.queries import statements_sent

log = logging.getLogger("orderflow")
RELAY_BATCH = 500  # events per relay read


class WorkerStore(UnitOfWork, OutboxFeed, Protocol):
    """What a worker uses of the store: the unit of work (executor) and the outbox (relay)."""


class ApiStore(OrderStore, Protocol):
    """What the API uses of the store adapter: both sides of the order store, the user
    directory, and the readiness checks."""

    @property
    def users(self) -> Users: ...

    async def ping(self) -> bool: ...

    async def migrations_current(self) -> bool: ...


@asynccontextmanager
async def database_url(settings: Settings) -> AsyncIterator[str]:
    """The configured database, or the embedded one under ORDERFLOW_HOME for the block."""
    if settings.database_url:
        await check_database(settings.database_url)
        yield settings.database_url
        return
    if not embedded_database_exists(settings.home):
        # Said, not silent: a command run in the wrong folder would otherwise make a second,
        # empty database without anyone noticing.
        log.info("creating an embedded PostgreSQL under %s", settings.home.resolve())
    url = await asyncio.to_thread(start_embedded, settings.home)
    try:
        yield url
    finally:
        await asyncio.to_thread(stop_embedded, settings.home)


async def check_ports(
    settings: Settings, *, api: bool = False, mocks: bool = False, metrics: bool = False
) -> None:
    """Every port the command will listen on, tried at once before anything starts or is
    printed (seeded tokens included): `StartupError` with one line per port that cannot be
    used, so a person fixes them all in one go. Port 0 (any free port) is never busy."""
    wanted: list[tuple[str, int, str]] = []
    if api:
        wanted.append((settings.http_host, settings.http_port, "ORDERFLOW_HTTP_PORT"))
    if mocks:
        wanted.append(("127.0.0.1", settings.mocks_port, "ORDERFLOW_MOCKS_PORT"))
    if metrics and settings.metrics_port:
        wanted.append((settings.http_host, settings.metrics_port, "ORDERFLOW_METRICS_PORT"))
    problems = await asyncio.to_thread(_port_problems, wanted)
    if problems:
        raise StartupError("\n".join(problems))


def _port_problems(wanted: list[tuple[str, int, str]]) -> list[str]:
    problems: list[str] = []
    taken: dict[int, str] = {}
    for host, port, variable in wanted:
        if port == 0:
            continue
        if port in taken:
            problems.append(
                f"{variable} and {taken[port]} are both {port}; set one of them to another port"
            )
            continue
        taken[port] = variable
        try:
            # As the servers will listen (SO_REUSEADDR): a port in TIME_WAIT is not busy.
            socket.create_server((host, port)).close()
        except OSError as exc:
            problems.append(str(listen_error(exc, host, port, variable)))
    return problems


@asynccontextmanager
async def open_store(url: str, settings: Settings) -> AsyncIterator[PgOrderStore]:
    """A pool sized for the executor's concurrency plus the API."""
    size = settings.timing.max_concurrent + 10
    async with PgOrderStore.open(
        url,
        min_size=2,
        max_size=size,
        transaction_pooler=settings.database_pooler == "transaction",
        optimisations=settings.store_optimisations,
    ) as store:
        yield store


AUTOVACUUM_OFF = (
    "autovacuum is off on this PostgreSQL server: nothing refreshes the tables' statistics, so "
    "the plans each connection caches while the tables are small (sequential scans) are kept "
    "as they grow and every step costs more; turn autovacuum on, or run ANALYZE on a schedule"
)


async def warn_if_autovacuum_off(store: PgOrderStore) -> None:
    """Log a warning when the server will not keep the statistics fresh; said by the long-running
    commands once they are up (never by a one-shot command, whose errors are one line)."""
    try:
        on = await store.autovacuum_on()
    except StoreUnavailable:
        return  # the service's own checks report an unreachable database
    if not on:
        log.warning(AUTOVACUUM_OFF)


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
        statements=statements_sent,
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
        try:
            await site.start()
        except OSError as exc:
            raise listen_error(
                exc, settings.http_host, settings.metrics_port, "ORDERFLOW_METRICS_PORT"
            ) from None
        yield f"http://{settings.http_host}:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def outbound_services(
    settings: Settings, simulated_url: str | None = None, telemetry: Telemetry | None = None
) -> AsyncIterator[Services]:
    """HTTP clients of the four services, each behind its own bulkhead; a service without a
    configured URL goes to `simulated_url` (the built-in simulated services). With the three
    core services external and no ORDERFLOW_NOTIFICATIONS_URL, there is no notification client
    (a version-2 notification step is then blocked and its order waits for an operator)."""
    async with AsyncExitStack() as stack:
        clients: list[HttpService | None] = []
        for cls, url in (
            (HttpWarehouse, settings.warehouse_url),
            (HttpPayments, settings.payments_url),
            (HttpShipping, settings.shipping_url),
            (HttpNotifications, settings.notifications_url),
        ):
            if cls is HttpNotifications and url is None and settings.external_services:
                clients.append(None)
                continue
            bulkhead = Bulkhead(settings.bulkhead_limit, settings.bulkhead_policy)  # type: ignore[arg-type]
            client = cls(
                settings.service_url(url),
                bulkhead=bulkhead,
                timeout_s=settings.timing.call_timeout_s,
                connection_limit=settings.bulkhead_limit,
                telemetry=telemetry,
            )
            clients.append(await stack.enter_async_context(client))
        warehouse, payments, shipping, notifications = clients
        yield Services(warehouse, payments, shipping, notifications)  # type: ignore[arg-type]


@asynccontextmanager
async def simulated_services_if_needed(settings: Settings) -> AsyncIterator[str | None]:
    """Start the built-in simulated services unless all three URLs are configured."""
    if settings.external_services:
        yield None
        return
    async with AsyncExitStack() as stack:
        mocks_context = running_mocks(
            "127.0.0.1",
            settings.mocks_port,
            latency_ms=settings.mocks_latency_ms,
            hold_s=settings.mocks_hold_s,
            state_path=settings.mocks_state,
        )
        try:
            mocks = await stack.enter_async_context(mocks_context)
        except JournalError as exc:
            raise StartupError(f"ORDERFLOW_MOCKS_STATE: {exc}") from None
        except OSError as exc:
            raise listen_error(
                exc, "127.0.0.1", settings.mocks_port, "ORDERFLOW_MOCKS_PORT"
            ) from None
        yield mocks.url


@asynccontextmanager
async def serving_api(
    store: ApiStore, settings: Settings, telemetry: Telemetry | None = None
) -> AsyncIterator[str]:
    """The REST API on ORDERFLOW_HTTP_HOST:PORT; yields its base URL."""
    clock = SystemClock()
    users = CachedUsers(store.users, clock, ttl_s=settings.token_cache_s)
    service = OrderService(
        store,
        clock,
        users,
        timing=settings.timing,
        process_version=settings.process_version,
        keyed_order_ids=getattr(store, "distributed", False),  # a PgOrderStore on Citus
    )

    async def ready() -> bool:
        return await store.ping() and await store.migrations_current()

    limits = ServerLimits(**attrs.asdict(settings.http_limits))
    app = create_app(
        service,
        readiness=ready,
        body_timeout_s=limits.body_timeout_s,
        telemetry=telemetry,
        request_deadline_s=settings.request_deadline_s,
    )
    async with AsyncExitStack() as stack:
        try:
            _, port = await stack.enter_async_context(
                serving(app, settings.http_host, settings.http_port, limits)
            )
        except OSError as exc:
            raise listen_error(
                exc, settings.http_host, settings.http_port, "ORDERFLOW_HTTP_PORT"
            ) from None
        yield f"http://{settings.http_host}:{port}"


async def run_workers(
    store: WorkerStore,
    services: Services,
    settings: Settings,
    wakeups: WakeUps,
    stop: asyncio.Event,
    telemetry: Telemetry | None = None,
) -> str:
    """An executor, the outbox relay and the wake-ups (`PgWakeUps`: LISTEN/NOTIFY), until
    `stop`; then a graceful end.

    Returns what the end left behind, for the `stopped` line (`stop_summary`)."""
    clock = SystemClock()
    executor = Executor(
        store=store,
        services=services,
        clock=clock,
        worker_id=settings.worker_id,
        timing=settings.timing,
        observer=telemetry or NULL_OBSERVER,
    )
    async with AsyncExitStack() as stack:
        sinks: list[EventSink] = []
        if settings.webhook_url:
            sinks.append(await stack.enter_async_context(WebhookSink(settings.webhook_url)))
        if settings.nats is not None:
            sinks.append(await stack.enter_async_context(nats_sink(settings.nats, settings)))
        sink = _checkpointed(AllSinks(*sinks)) if sinks else None
        relay = OutboxRelay(
            store,
            clock,
            sink=sink,
            retry=settings.timing.retry,
            batch=RELAY_BATCH,
            batch_s=RELAY_BATCH_S,
            observer=telemetry or NULL_OBSERVER,
        )

        async def relay_pass() -> None:
            # A full batch means a backlog (after an outage): catch up without the poll pause.
            while await relay.run_once() >= RELAY_BATCH and not stop.is_set():
                pass

        tasks = [
            asyncio.create_task(executor.run(), name="executor"),
            asyncio.create_task(
                _every(settings.timing.poll_interval_s, relay_pass, stop, "outbox relay"),
                name="relay",
            ),
            asyncio.create_task(wakeups.listen(executor.wake), name="listen"),
        ]
        await stop.wait()
        abandoned = await executor.stop(settings.shutdown_grace_s)
        stopped_at = clock.now()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await relay.run_once()  # hand on what the last steps committed
    return stop_summary(abandoned, settings, stopped_at)


def stop_summary(abandoned: int, settings: Settings, stopped_at: datetime) -> str:
    """What a graceful stop left behind: nothing, or how many steps wait for their leases
    to run out and by when another worker (or this one restarted) retries them."""
    if not abandoned:
        return "every in-flight step finished"
    lease_s = settings.timing.lease_s
    # Leases were taken or renewed before the stop, so they run out by then (whole seconds up).
    retry_by = stopped_at + timedelta(seconds=lease_s)
    if retry_by.microsecond:
        retry_by = retry_by.replace(microsecond=0) + timedelta(seconds=1)
    steps = "step" if abandoned == 1 else "steps"
    return (
        f"{abandoned} in-flight {steps} did not finish within ORDERFLOW_SHUTDOWN_GRACE_S="
        f"{settings.shutdown_grace_s:g} s and {'was' if abandoned == 1 else 'were'} left to"
        f" lease expiry; any running worker retries them (next attempt, same idempotency key)"
        f" once their leases run out, by {retry_by:%Y-%m-%dT%H:%M:%SZ}"
        f" (ORDERFLOW_LEASE_S={lease_s:g} s)"
    )


@asynccontextmanager
async def nats_sink(nats: NatsSettings, settings: Settings) -> AsyncIterator[EventSink]:
    """The JetStream publisher; a stream that does not fit stops start-up (`ConfigError`)."""
    try:
        from orderflow_nats import NatsSink, StreamMismatch  # noqa: PLC0415 (optional extra)
    except ImportError:
        raise ConfigError(
            "ORDERFLOW_NATS_URL is set but the NATS client is missing: "
            f"pip install '{DISTRIBUTION}[nats]'"
        ) from None
    sink = NatsSink(
        nats.url,
        stream=nats.stream,
        subject_prefix=nats.subject_prefix,
        duplicate_window_s=nats.duplicate_window_s,
        timeout_s=settings.timing.call_timeout_s,
    )
    try:
        await sink.__aenter__()
    except StreamMismatch as exc:
        await sink.__aexit__(None, None, None)
        raise ConfigError(str(exc)) from None
    try:
        yield sink
    finally:
        await sink.__aexit__(None, None, None)


# A test hook, off unless set: after this many events were handed on, the process announces it
# and stops itself (SIGSTOP) before marking them, so a crash test can SIGKILL it exactly there.
STOP_AFTER_PUBLISH = "_ORDERFLOW_TEST_STOP_AFTER_PUBLISH"


def _checkpointed(sink: EventSink) -> EventSink:
    raw = os.environ.get(STOP_AFTER_PUBLISH)
    if not raw:
        return sink
    remaining = [int(raw)]

    async def stopping(event: OutboxEvent) -> Outcome:
        outcome = await sink(event)
        if isinstance(outcome, Succeeded):
            remaining[0] -= 1
            if remaining[0] == 0:
                print(f"checkpoint: published {event.event_id}, not marked", flush=True)
                os.kill(os.getpid(), signal.SIGSTOP)
        return outcome

    return stopping


async def _every(
    interval_s: float,
    work: Callable[[], Awaitable[object]],
    stop: asyncio.Event,
    what: str = "background work",
) -> None:
    """Run `work` every `interval_s` until `stop`; a failure is logged once per outage (with
    a traceback only if it is not the database being unavailable), and so is the recovery."""
    failures = 0
    loop = asyncio.get_running_loop()
    since = 0.0
    while not stop.is_set():
        try:
            await work()
        except Exception as exc:
            failures += 1
            if failures == 1:
                since = loop.time()
                expected = isinstance(exc, StoreUnavailable)
                log.warning(
                    "%s failed (%s); retrying every %.1f s, logged again when it recovers",
                    what,
                    " ".join(str(exc).split()) if expected else type(exc).__name__,
                    interval_s,
                    exc_info=not expected,
                )
        else:
            if failures:
                log.info(
                    "%s recovered after %d failed attempts over %.1f s",
                    what,
                    failures,
                    loop.time() - since,
                )
            failures = 0
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval_s):
                await stop.wait()

