"""`python -m bench.worker_only`: the executor alone, for A/B comparisons of the worker path.

N orders are created first (through `OrderService`, not timed), then one in-process executor
(concurrency 20, chaining on, the real HTTP clients) runs them to `shipped` against the
simulated services in a subprocess. Reported: orders/s, the executor process's CPU and
PostgreSQL's CPU per order, transactions per order (the watcher's polls taken out), the
statements the executor sent per order (BEGIN/COMMIT not counted), this database's WAL bytes
and rows written per order (`bench/walstats.py`). No API
and no load generator compete for the cores, so changes to the store and the executor show up
with less noise than in the end-to-end bench; run it twice, or against an older checkout
(`PYTHONPATH=<checkout>`), in the same minute to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
import os
import time
from typing import Any

import psycopg
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from bench import cpu, pgadmin, prefill, walstats
from bench.run import DEFAULT_URL
from orderflow import tracing
from orderflow_http.telemetry import Telemetry
from orderflow_pg import PgOrderStore
from orderflow_pg.migrate import migrate

DATABASE = "orderflow_bench_worker_only"
POLL_S = 0.05


async def _shipped(conn: psycopg.AsyncConnection[Any]) -> int:
    return await prefill.count(conn, prefill.SHIPPED)


class StatementCounter:
    """Counts the statements this process sends through psycopg's async cursors."""

    def __init__(self) -> None:
        self.count = 0
        self._originals: list[tuple[str, Any]] = []

    def __enter__(self) -> StatementCounter:
        for name in ("execute", "executemany"):
            original = getattr(psycopg.AsyncCursor, name)
            self._originals.append((name, original))

            def counted(cursor: Any, *args: Any, _original: Any = original, **kw: Any) -> Any:
                self.count += 1
                return _original(cursor, *args, **kw)

            setattr(psycopg.AsyncCursor, name, counted)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self._originals:
            setattr(psycopg.AsyncCursor, name, original)


def _telemetry(mode: str) -> Any:
    """`off`: no observer at all; `metrics`: metrics, and the OpenTelemetry API without an SDK
    (what a process runs with no OTLP endpoint configured); `full`: metrics and every span
    recorded by the SDK and batch-exported (to a sink that drops them), as with an endpoint;
    `sampled`: the same with 10 % of the traces sampled; `otlp`: metrics and the provider the
    CLI installs (`orderflow.tracing`: OTLP exporter, OTEL_* variables, orderflow's default
    sampler), see `python -m bench.telemetry`."""
    if mode == "off":
        return None
    if mode == "metrics":
        return Telemetry()
    if mode == "otlp":
        return Telemetry(tracer_provider=tracing.tracer_provider())
    sampler = tracing.default_sampler(0.1) if mode == "sampled" else None

    class Dropping(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(BatchSpanProcessor(Dropping()))
    return Telemetry(tracer_provider=provider)


async def measure(
    server_url: str,
    orders: int,
    concurrency: int,
    database: str = DATABASE,
    telemetry: str = "off",
    filled: int = 0,
    latency_ms: int = 0,
) -> dict[str, Any]:
    observer = _telemetry(telemetry)
    url = pgadmin.create_database(server_url, database)
    await migrate(url)
    mocks = contextlib.ExitStack()
    postgres = cpu.locate_postgres(server_url)
    window = walstats.WalWindow(server_url)
    try:
        done_before = (await prefill.fill(url, filled, concurrency=concurrency)).orders
        base = mocks.enter_context(prefill.Mocks(latency_ms))
        async with PgOrderStore.open(url, min_size=2, max_size=concurrency + 10) as store:
            await prefill.create_orders(store, orders, observer)
            if observer is not None and hasattr(observer.tracer_provider, "force_flush"):
                # Export the creating requests' sampled spans now: the first export imports the
                # OTLP encoder and its HTTP client (a startup cost, ~0.2 s of CPU once), which
                # would otherwise land in the measured window of every run.
                observer.tracer_provider.force_flush()
            async with prefill.chaining_executor(
                store, base, concurrency, "bench-worker", observer
            ) as executor:
                window.open()
                stats0 = walstats.snapshot(server_url, database)
                hot0 = walstats.hot_updates(url)
                pg0 = cpu.postgres_cpu_s(postgres.postmaster) if postgres.postmaster else 0.0
                cpu0, began = cpu.self_cpu_s(), time.monotonic()
                with StatementCounter() as statements:
                    running = asyncio.create_task(executor.run())
                    polls = 1
                    watcher = await psycopg.AsyncConnection.connect(url, autocommit=True)
                    while await _shipped(watcher) < done_before + orders:
                        await asyncio.sleep(POLL_S)  # the bench's own watcher, not a test wait
                        polls += 1
                    elapsed = time.monotonic() - began
                    await watcher.close()
                    if observer is not None and hasattr(observer.tracer_provider, "shutdown"):
                        observer.tracer_provider.shutdown()  # its last export counts too
                    worker_s = cpu.self_cpu_s() - cpu0
                    pg_s = (
                        cpu.postgres_cpu_s(postgres.postmaster) - pg0
                        if postgres.postmaster
                        else 0.0
                    )
                    await executor.stop()
                    await running
                sent = statements.count - polls
        stats1 = walstats.snapshot(server_url, database)
        pgadmin.wait_no_sessions(server_url, database)
        hot = walstats.hot_share(hot0, walstats.hot_updates(url))
        xacts = stats1["xacts"] - stats0["xacts"] - polls
        written = walstats.per_order(stats0, stats1, orders, walstats.database_wal(stats0, stats1))
    finally:
        window.close()
        mocks.close()
        pgadmin.drop_database(server_url, database)
    return {
        "mocks_latency_ms": latency_ms,
        "orders_per_s": round(orders / elapsed, 1),
        "worker_cpu_ms_per_order": round(1000 * worker_s / orders, 2),
        "postgres_cpu_ms_per_order": (
            round(1000 * pg_s / orders, 2) if postgres.postmaster else postgres.note
        ),
        "xacts_per_order": round(xacts / orders, 2),
        "statements_per_order": round(sent / orders, 2),
        "commit_batches": getattr(getattr(executor, "commits", None), "batches", None),
        **written,
        **hot,
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.worker_only", description=__doc__)
    p.add_argument(
        "--database-url", default=os.environ.get("ORDERFLOW_BENCH_DATABASE_URL", DEFAULT_URL)
    )
    p.add_argument("--orders", type=int, default=600)
    p.add_argument("--concurrency", type=int, default=20)
    p.add_argument("--database", default=DATABASE, help="scratch database (dropped after)")
    p.add_argument(
        "--prefill",
        type=int,
        default=0,
        help="orders run to the end and analyzed before the measured ones (bench/prefill.py: "
        "a database in steady state instead of a fresh one)",
    )
    p.add_argument(
        "--latency",
        type=int,
        default=0,
        help="the simulated services' latency, ms (the end-to-end bench runs 0 and 20)",
    )
    p.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="event loop, as ORDERFLOW_EVENT_LOOP (a checkout without the choice runs asyncio's)",
    )
    p.add_argument(
        "--telemetry",
        choices=["off", "metrics", "full", "sampled", "otlp"],
        default="off",
        help="the observer: none, metrics (+ no-op tracing API), metrics + recorded "
        "spans, or metrics + 10%% sampled spans",
    )
    args = p.parse_args()
    coro = measure(
        args.database_url,
        args.orders,
        args.concurrency,
        args.database,
        args.telemetry,
        args.prefill,
        args.latency,
    )
    if importlib.util.find_spec("orderflow.eventloop") is None:
        result, loop = asyncio.run(coro), "asyncio"
    else:
        eventloop = importlib.import_module("orderflow.eventloop")
        result = eventloop.run(coro, args.loop)
        loop = args.loop if eventloop.loop_factory(args.loop) else "asyncio"
    print({**result, "loop": loop})


if __name__ == "__main__":
    main()
