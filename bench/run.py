"""`python -m bench`: the whole benchmark in one command (see docs/benchmark.md)."""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import sys
import time
from pathlib import Path
from typing import Any

import attrs

from bench import launch, machine, peer, pgadmin, prefill, report, scenario, soak

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
PREFIX = "orderflow_bench_"
RESULTS = launch.REPO / "bench" / "results"


# What `--quick` changes: a short smoke run of one configuration and one peer.
QUICK: dict[str, Any] = {
    "orders": 300, "latencies": [0], "workers": [1], "sweep": [0.5, 1.0], "sweep_seconds": 4.0,
    "sweep_at": "0:1", "peers": "pgqueuer-asyncpg", "prefill": 1000, "pairs": 0,
}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--database-url", default=os.environ.get("ORDERFLOW_BENCH_DATABASE_URL",
                                                            DEFAULT_URL),
                   help="server where the bench may create and drop databases")
    p.add_argument("--orders", type=int, default=5000, help="orders per closed-loop run")
    p.add_argument("--latencies", type=_ints, default=[0, 20], help="mocks latency, ms (list)")
    p.add_argument("--workers", type=_ints, default=[1, 2, 4], help="worker processes (list)")
    p.add_argument("--concurrency", type=int, default=20, help="steps in flight per worker")
    p.add_argument("--clients", type=int, default=16, help="customers posting in closed loop")
    p.add_argument("--sweep", type=_floats, default=[0.25, 0.5, 0.75, 1.0, 1.25],
                   help="offered load as fractions of the measured maximum")
    p.add_argument("--sweep-seconds", type=float, default=10.0)
    p.add_argument("--sweep-at", default="20:1", help="LATENCY_MS:WORKERS of the sweep")
    p.add_argument("--soak-seconds", type=float, default=None,
                   help="open-loop soak sampling RSS; 0 skips it (default 600, --quick: 0)")
    p.add_argument("--soak-load", type=float, default=0.5,
                   help="soak offered load as a fraction of the --sweep-at maximum")
    p.add_argument("--peers", default="pgqueuer-asyncpg,procrastinate,dbos",
                   help="comma list of pgqueuer, pgqueuer-asyncpg, procrastinate, dbos; or none")
    p.add_argument("--dbos-polling", type=float, default=peer.DBOS_POLLING_S,
                   help="DBOS's queue polling interval, s (its own default is 1)")
    p.add_argument("--dbos-mode", choices=["sync", "async"], default=peer.DBOS_MODE,
                   help="DBOS workflows and steps as sync functions (its threads) or async ones")
    p.add_argument("--dbos-enqueue-batch", type=int, default=peer.DBOS_ENQUEUE_BATCH,
                   help="DBOS workflows enqueued per transaction (1: one per order)")
    p.add_argument("--peer-orders", type=int, default=None, help="default: --orders")
    p.add_argument("--pairs", type=int, default=3,
                   help="at each mocks latency, this many alternated rounds of ours (1 worker, "
                        "--peer-orders orders) and each of --pair-with, for the ratios' spread "
                        "on this host; 0 skips them (--quick: 0)")
    p.add_argument("--pair-with", default="pgqueuer-asyncpg,dbos,floor",
                   help="what each alternated round runs after ours (comma list of peers and "
                        "`floor`)")
    p.add_argument("--floor", action=argparse.BooleanOptionalAction, default=True,
                   help="measure the cost floor (bench/floor.py) at each mocks latency")
    p.add_argument("--prefill", type=int, default=10000,
                   help="finished orders in every run's database before its load, vacuumed and "
                        "analyzed, as in a service that has been running (bench/prefill.py); "
                        "0: a fresh database")
    p.add_argument("--profile", action=argparse.BooleanOptionalAction, default=None,
                   help="py-spy a worker during an extra run (latency 0, 1 worker)")
    p.add_argument("--profile-orders", type=int, default=1000)
    p.add_argument("--launcher", choices=["auto", "cli", "fallback"], default="auto")
    p.add_argument("--timeout", type=float, default=600.0, help="per run, seconds")
    p.add_argument("--quick", action="store_true", help="a short smoke run (~2 minutes)")
    p.add_argument("--db-prefix", default=PREFIX,
                   help="name prefix of the bench's databases (leftovers with it are dropped "
                   "at start: give each concurrent bench on one server its own)")
    p.add_argument("--results", type=Path, default=RESULTS,
                   help="where latest.{json,md,png} are written")
    from bench import longhorizon  # noqa: PLC0415 (it imports this module)

    p.add_argument("--citus", action="store_true",
                   help="instead of the suite: --orders on a local Citus cluster (coordinator "
                        "+ 2 workers) beside one server, per node (bench/citus_bench.py)")
    longhorizon.add_arguments(p)  # --long-horizon N: bench/longhorizon.py instead of the suite
    if "--quick" in (sys.argv[1:] if argv is None else argv):
        p.set_defaults(**QUICK)  # defaults only: options given explicitly still win
    args = p.parse_args(argv)
    if args.profile is None:
        args.profile = not args.quick
    if args.soak_seconds is None:
        args.soak_seconds = 0.0 if args.quick else 600.0
    if args.soak_seconds > 0 and args.soak_load <= 0:
        p.error("--soak-load must be above 0 (an open loop needs a rate)")
    args.peer_orders = args.peer_orders or args.orders
    return args


def _setup(args: argparse.Namespace, launcher: str) -> scenario.Setup:
    return scenario.Setup(
        launcher=launcher, server_url=args.database_url, template=f"{args.db_prefix}template",
        db_prefix=args.db_prefix, customer_token=secrets.token_urlsafe(24),
        operator_token=secrets.token_urlsafe(24), concurrency=args.concurrency,
        clients=args.clients, timeout_s=args.timeout,
    )


async def _prepare_template(setup: scenario.Setup, orders: int) -> scenario.Setup:
    """The database every run starts from: migrated, seeded, and with `orders` finished orders
    (the setup returned knows from when on orders are a run's own)."""
    url = pgadmin.create_database(setup.server_url, setup.template)
    env = {"ORDERFLOW_DATABASE_URL": url, "ORDERFLOW_CUSTOMER_TOKEN": setup.customer_token,
           "ORDERFLOW_OPERATOR_TOKEN": setup.operator_token}
    launch.run_once(setup.launcher, "migrate", env)
    launch.run_once(setup.launcher, "seed", env)
    if orders > 0:
        print(f"prefill: {orders} orders run to the end, then VACUUM (ANALYZE)", flush=True)
        began = time.monotonic()
        filled = await prefill.fill(url, orders, concurrency=setup.concurrency)
        setup = attrs.evolve(setup, since=filled.since)
        print(f"  in {time.monotonic() - began:.0f} s", flush=True)
    pgadmin.wait_no_sessions(setup.server_url, setup.template)
    return setup


def _say(what: str, figures: dict[str, Any]) -> None:
    print(f"  {what}: {figures.get('orders_per_s')} orders/s, "
          f"{figures.get('xacts_per_order')} xacts/order, POST p99 "
          f"{figures.get('post_latency_ms', {}).get('p99')} ms, flow p50 "
          f"{figures.get('created_to_shipped_ms', {}).get('p50')} ms, "
          f"states {figures.get('states')}", flush=True)


async def _closed_runs(args: argparse.Namespace, setup: scenario.Setup) -> list[dict[str, Any]]:
    runs = []
    for latency in args.latencies:
        for workers in args.workers:
            name = f"l{latency}_w{workers}"
            print(f"run {name}: {args.orders} orders, mocks {latency} ms, {workers} worker(s)")
            figures = await scenario.run(setup, name, latency=latency, workers=workers,
                                         load_spec=scenario.Load(orders=args.orders))
            _say(name, figures)
            runs.append(figures)
    return runs


@attrs.frozen
class Top:
    """The closed-loop orders/s of the `--sweep-at` configuration: what the sweep and the soak
    offer fractions of, measured once."""

    latency: int
    workers: int
    orders_per_s: float


async def _top(
    args: argparse.Namespace, setup: scenario.Setup, runs: list[dict[str, Any]]
) -> Top:
    latency, workers = (int(x) for x in args.sweep_at.split(":"))
    base = next((r for r in runs if r["mocks_latency_ms"] == latency and r["workers"] == workers),
                None)
    if base is None:
        base = await scenario.run(setup, f"sweep_base_l{latency}_w{workers}", latency=latency,
                                  workers=workers, load_spec=scenario.Load(orders=args.orders))
    return Top(latency, workers, base["orders_per_s"] or 1.0)


async def _sweep(
    args: argparse.Namespace, setup: scenario.Setup, at: Top
) -> list[dict[str, Any]]:
    latency, workers, top = at.latency, at.workers, at.orders_per_s
    points = []
    for fraction in args.sweep:
        rate = round(top * fraction, 1)
        name = f"sweep_{round(fraction * 100)}"
        print(f"sweep {name}: {rate}/s offered ({fraction:g} × {top}) for {args.sweep_seconds} s")
        spec = scenario.Load(rate=rate, seconds=args.sweep_seconds)
        figures = await scenario.run(setup, name, latency=latency, workers=workers,
                                     load_spec=spec)
        figures["fraction_of_max"] = fraction
        _say(name, figures)
        points.append(figures)
    return points


async def _soak(args: argparse.Namespace, setup: scenario.Setup, at: Top) -> dict[str, Any] | None:
    """One long open loop at `--soak-load` of the maximum, RSS sampled throughout (None when
    `--soak-seconds` is 0)."""
    if args.soak_seconds <= 0:
        return None
    rate = round(at.orders_per_s * args.soak_load, 1)
    print(f"soak: {rate}/s offered ({args.soak_load:g} × {at.orders_per_s}) for "
          f"{args.soak_seconds:g} s, RSS every {soak.SAMPLE_EVERY_S:g} s", flush=True)
    # The watcher's timeout counts from the first POST: give it the soak on top of --timeout.
    long_setup = attrs.evolve(setup, timeout_s=setup.timeout_s + args.soak_seconds)
    figures = await scenario.run(long_setup, "soak", latency=at.latency, workers=at.workers,
                                 load_spec=scenario.Load(rate=rate, seconds=args.soak_seconds),
                                 rss_every_s=soak.SAMPLE_EVERY_S)
    _say("soak", figures)
    section = soak.summary(figures, seconds=args.soak_seconds, fraction=args.soak_load)
    print(f"  RSS growth after {section['warmup_s']:g} s warm-up: "
          + ", ".join(f"{role} {p['baseline_mib']} → {p['end_mib']} MiB ({p['growth_pct']} %)"
                      for role, p in section["processes"].items()), flush=True)
    return section


async def _profile(args: argparse.Namespace, setup: scenario.Setup) -> dict[str, Any] | None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "profile-worker.txt"
    orders = min(args.orders, args.profile_orders)
    peer.ensure_installed()  # py-spy lives in the bench's venv, which the peers' runs prepare
    print(f"profile: py-spy on worker 0 during {orders} orders (mocks 0 ms, 1 worker)")
    figures = await scenario.run(setup, "profile", latency=0, workers=1,
                                 load_spec=scenario.Load(orders=orders),
                                 profile_to=str(out))
    _say("profile (under py-spy)", figures)
    return figures


def _peer_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"dbos_polling_s": args.dbos_polling, "dbos_mode": args.dbos_mode,
            "dbos_enqueue_batch": args.dbos_enqueue_batch}


def _say_peer(system: str, result: dict[str, Any]) -> None:
    print(f"  {system}: {result.get('chains_per_s')} chains/s, "
          f"{result.get('xacts_per_chain')} xacts/chain, CPU "
          f"{result.get('cpu_total_ms_per_order')} ms/order {result.get('cpu_ms_per_order')} "
          f"{result.get('error', '')}", flush=True)


async def _floor(args: argparse.Namespace, setup: scenario.Setup) -> list[dict[str, Any]]:
    """The cost floor (bench/floor.py) once per mocks latency, on orderflow's interpreter."""
    if not args.floor:
        return []
    runs = []
    for latency in args.latencies:
        print(f"floor: {args.peer_orders} orders, mocks {latency} ms", flush=True)
        result = await peer.run(setup, peer.FLOOR, latency=latency, orders=args.peer_orders,
                                concurrency=args.concurrency)
        _say_peer(peer.FLOOR, result)
        runs.append(result)
    return runs


async def _peers(args: argparse.Namespace, setup: scenario.Setup) -> dict[str, Any]:
    systems = [s for s in args.peers.split(",") if s and s != "none"]
    if not systems:
        return {"runs": []}
    versions = peer.ensure_installed()
    if versions is None:
        return {"runs": [], "error": "bench/.peer-venv could not be prepared"}
    runs = []
    for latency in args.latencies:
        for system in systems:
            print(f"peer {system}: {args.peer_orders} chains, mocks {latency} ms")
            result = await peer.run(setup, system, latency=latency, orders=args.peer_orders,
                                    concurrency=args.concurrency, options=_peer_options(args))
            _say_peer(system, result)
            runs.append(result)
    return {"versions": versions, "runs": runs}


async def pairs(
    args: argparse.Namespace, setup: scenario.Setup, *, tag: str = ""
) -> list[dict[str, Any]]:
    """Ours and then each of `--pair-with` (peers and the floor) in turn, `--pairs` times per
    mocks latency: on a host whose speed drifts by tens of percent within minutes, one run of
    each gives a ratio that moves by ±0.15; the runs of one round are a minute or two apart,
    and the spread of the rounds says how far one ratio can be trusted. Each entry: our
    orders/s as `ours`, each other's chains/s under its name, and the CPU per order of all."""
    others = [s for s in args.pair_with.split(",") if s and s != "none"]
    needs_venv = any(s != peer.FLOOR for s in others)
    if args.pairs <= 0 or (needs_venv and peer.ensure_installed() is None):
        return []
    found = []
    for latency in args.latencies:
        for k in range(args.pairs):
            name = f"pair{tag}{k}_l{latency}"
            print(f"pair {k + 1}/{args.pairs}, mocks {latency} ms: {args.peer_orders} orders "
                  f"(1 worker), then {', '.join(others)}", flush=True)
            ours = await scenario.run(setup, name, latency=latency, workers=1,
                                      load_spec=scenario.Load(orders=args.peer_orders))
            entry: dict[str, Any] = {"mocks_latency_ms": latency,
                                     "ours": ours.get("orders_per_s"),
                                     "cpu_ms_per_order": {"ours": ours.get("cpu_ms_per_order"),
                                                          },
                                     "cpu_total_ms_per_order": {
                                         "ours": ours.get("cpu_total_ms_per_order")}}
            for system in others:
                theirs = await peer.run(setup, system, latency=latency,
                                        orders=args.peer_orders, concurrency=args.concurrency,
                                        options=_peer_options(args))
                key = report.pair_key(system)
                entry[key] = theirs.get("chains_per_s")
                entry["cpu_ms_per_order"][key] = theirs.get("cpu_ms_per_order")
                entry["cpu_total_ms_per_order"][key] = theirs.get("cpu_total_ms_per_order")
                if theirs.get("error"):
                    print(f"  {system}: {theirs['error'][-300:]}", flush=True)
            found.append(entry)
            print("  " + ", ".join(f"{k} {entry[k]}/s ({entry['cpu_total_ms_per_order'][k]} "
                                   "ms CPU)" for k in entry["cpu_total_ms_per_order"]),
                  flush=True)
    return found


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    launcher = launch.choose_launcher(args.launcher)
    setup = _setup(args, launcher)
    left = pgadmin.drop_leftovers(args.database_url, args.db_prefix)
    if left:
        print(f"dropped databases an interrupted run left: {', '.join(left)}")
    facts = machine.facts(args.database_url)
    print(f"launcher: {launcher}; {facts['cores']} cores, {facts['ram_mib']} MiB, "
          f"PostgreSQL {facts['postgresql']['server_version']}", flush=True)
    results: dict[str, Any] = {"machine": facts, "launcher": launcher, "options": vars(args)}
    setup = await _prepare_template(setup, args.prefill)
    try:
        results["floor"] = await _floor(args, setup)
        results["runs"] = await _closed_runs(args, setup)
        top = await _top(args, setup, results["runs"])
        results["sweep"] = await _sweep(args, setup, top)
        results["soak"] = await _soak(args, setup, top)
        results["profile_run"] = await _profile(args, setup) if args.profile else None
        results["peers"] = await _peers(args, setup)
        results["pairs"] = await pairs(args, setup)
    finally:
        pgadmin.drop_database(args.database_url, setup.template)
    facts["load_average_at_end"] = machine.load_average()
    results["wall_time_s"] = round(time.monotonic() - started, 1)
    report.derive(results)
    return results


def main(argv: list[str] | None = None) -> None:
    # SIGTERM unwinds like Ctrl-C, so the started processes and databases are cleaned up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args = parse_args(argv)
    if args.long_horizon:
        from bench import longhorizon  # noqa: PLC0415

        longhorizon.main(argv)
        return
    if args.citus:
        from bench import citus_bench  # noqa: PLC0415

        asyncio.run(citus_bench.main_async(args))
        return
    results = asyncio.run(main_async(args))
    paths = report.write(results, args.results)
    print(f"done in {results['wall_time_s']} s: " + ", ".join(str(p) for p in paths))
