"""`python -m bench.compare`: the alternated rounds alone, and what a lightly loaded service costs.

The full bench (`python -m bench`) takes half an hour; an A/B of a change, or a look at how far
orderflow is from its peers and from the cost floor right now, needs only the rounds: ours
(1 worker), then each of `--pair-with` (pgqueuer-asyncpg, DBOS, the floor), `--pairs` times
per mocks latency, each run on a fresh database cloned from one prefilled template. With
`--low-load F` it also runs ours in an open loop at F × the rounds' mean orders/s of the
first latency in `--low-latencies` (default 20 ms), and with `--idle-seconds S` it reads the CPU
the API, a worker, the mocks and PostgreSQL use in S seconds with no orders at all. Takes the
options of `python -m bench` that apply (`--peer-orders`, `--latencies`, `--pairs`,
`--pair-with`, `--dbos-*`, `--prefill`, `--db-prefix`, `--results`, …); writes
`compare.json` and `compare.md` under `--results`.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import sys
import time
from typing import Any

from bench import cpu, launch, machine, peer, pgadmin, report, run, scenario

LOW_LATENCY_MS = 20


async def idle(setup: scenario.Setup, seconds: float, latency: int) -> dict[str, Any]:
    """CPU per second of each process (and PostgreSQL) of a started service with no load."""
    dbname = f"{setup.db_prefix}idle"
    db_url = pgadmin.create_database(setup.server_url, dbname, template=setup.template)
    pg = cpu.locate_postgres(setup.server_url)
    try:
        with scenario._started(setup, "idle", db_url, latency, 1) as nodes:
            await launch.wait_for_port(nodes.api, nodes.api_port)
            for worker, port in zip(nodes.workers, nodes.worker_metrics_ports, strict=True):
                await launch.wait_for_port(worker, port)  # its /metrics: it is up
            await asyncio.sleep(scenario.SETTLE_S * 2)
            start = cpu.read(nodes.by_role("idle"), pg)
            await asyncio.sleep(seconds)
            end = cpu.read(nodes.by_role("idle"), pg)
        pgadmin.wait_no_sessions(setup.server_url, dbname)
        xacts = pgadmin.xact_commit(setup.server_url, dbname)
    finally:
        pgadmin.drop_database(setup.server_url, dbname)
    window = end.at - start.at
    per_s = {role: round((end.cpu_s[role] - start.cpu_s[role]) / window * 1000, 2)
             for role in end.cpu_s if role in start.cpu_s and role != cpu.LOAD_GENERATOR}
    return {"seconds": round(window, 1), "cpu_ms_per_s": per_s,
            "cpu_total_ms_per_s": round(sum(per_s.values()), 2),
            "xacts_whole_life": xacts}


async def low_load(setup: scenario.Setup, rate: float, seconds: float,
                   latency: int) -> dict[str, Any]:
    """Ours in an open loop at `rate` orders/s, then the cost floor offered the same orders at
    the same rate (bench/floor.py's open loop): what each spends per order when nothing else
    is in flight to share a commit or a wake-up with, and their latencies."""
    figures = await scenario.run(setup, f"low_{round(rate)}", latency=latency, workers=1,
                                 load_spec=scenario.Load(rate=rate, seconds=seconds))
    keep = ("offered_rate", "orders_per_s", "mocks_latency_ms", "xacts_per_order",
            "statements_per_order", "created_to_shipped_ms", "post_latency_ms",
            "cpu_ms_per_order", "cpu_total_ms_per_order", "statements_by_name_per_order")
    ours = {k: figures.get(k) for k in keep}
    floor = await peer.run(setup, peer.FLOOR, latency=latency,
                           orders=max(1, round(rate * seconds)), concurrency=setup.concurrency,
                           options={"floor_rate": rate})
    ours["floor"] = {k: floor.get(k) for k in (
        "offered_rate", "chains_per_s", "xacts_per_chain", "chain_latency_ms",
        "cpu_ms_per_order", "cpu_total_ms_per_order", "error") if floor.get(k) is not None}
    return ours | against_floor(ours)


def against_floor(low: dict[str, Any]) -> dict[str, float | None]:
    """Ours ÷ the floor at the same offered rate: CPU per order (every process of each) and
    the median latency (created→shipped against the floor's first call to last commit)."""
    floor = low.get("floor") or {}
    cpu_ours, cpu_floor = low.get("cpu_total_ms_per_order"), floor.get("cpu_total_ms_per_order")
    p50_ours = (low.get("created_to_shipped_ms") or {}).get("p50")
    p50_floor = (floor.get("chain_latency_ms") or {}).get("p50")
    return {
        "floor_cpu_ratio": round(cpu_ours / cpu_floor, 2) if cpu_ours and cpu_floor else None,
        "floor_p50_ratio": round(p50_ours / p50_floor, 2) if p50_ours and p50_floor else None,
    }


def options_of(args: Any) -> dict[str, Any]:
    """The options as the results keep them: the run's API token left out (the results are
    committed; a token, even of a database dropped since, does not belong in them)."""
    return {k: v for k, v in vars(args).items() if not k.endswith("token")}


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [f"# orderflow — alternated rounds ({results['date']})", "",
             f"{m['cores']} cores ({m['cpu']}), PostgreSQL "
             f"{m['postgresql']['server_version']}; load average {m['load_average_at_start']} → "
             f"{m.get('load_average_at_end')}; {results['options']['peer_orders']} orders per run,"
             f" concurrency {results['options']['concurrency']}; DBOS "
             f"{results['options']['dbos_mode']}, polling {results['options']['dbos_polling']:g}"
             f" s, {results['options']['dbos_enqueue_batch']} enqueued per transaction."]
    lines += report._pair_lines(results)
    if results.get("low_load"):
        lines += low_load_lines(results["low_load"])
    if results.get("idle"):
        lines += ["", f"idle: `{json.dumps(results['idle'])}`"]
    return "\n".join(lines) + "\n"


def low_load_lines(low: dict[str, Any]) -> list[str]:
    """The low-load run and the floor's at the same rate, as a table."""
    floor = low.get("floor") or {}
    flow = low.get("created_to_shipped_ms") or {}
    chain = floor.get("chain_latency_ms") or {}
    return [
        "", f"Low load: an open loop at {low.get('offered_rate')} orders/s, mocks "
        f"{low.get('mocks_latency_ms')} ms, ours (1 worker) and the floor offered the same rate:",
        "",
        "| | orders/s | CPU ms/order (by process) | total | p50 / p99 ms | xacts/order |",
        "|---|---|---|---|---|---|",
        f"| orderflow | {low.get('orders_per_s')} | {low.get('cpu_ms_per_order')} | "
        f"{low.get('cpu_total_ms_per_order')} | {flow.get('p50')} / {flow.get('p99')} | "
        f"{low.get('xacts_per_order')} |",
        f"| floor | {floor.get('chains_per_s')} | {floor.get('cpu_ms_per_order')} | "
        f"{floor.get('cpu_total_ms_per_order')} | {chain.get('p50')} / {chain.get('p99')} | "
        f"{floor.get('xacts_per_chain')} |",
        "", f"ours ÷ floor: CPU per order {low.get('floor_cpu_ratio')}, p50 "
        f"{low.get('floor_p50_ratio')}",
    ]


async def main_async(args: Any) -> dict[str, Any]:
    setup = run._setup(args, launch.choose_launcher(args.launcher))
    pgadmin.drop_leftovers(args.database_url, args.db_prefix)
    facts = machine.facts(args.database_url)
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               "machine": facts, "options": options_of(args)}
    setup = await run._prepare_template(setup, args.prefill)
    try:
        if args.idle_seconds > 0:
            results["idle"] = await idle(setup, args.idle_seconds, LOW_LATENCY_MS)
            print(f"idle: {results['idle']}", flush=True)
        results["pairs"] = await run.pairs(args, setup)
        if args.low_load > 0:
            ours = [p["ours"] for p in results["pairs"]
                    if p["mocks_latency_ms"] == LOW_LATENCY_MS and p.get("ours")]
            top = sum(ours) / len(ours) if ours else args.low_load_top
            rate = round(top * args.low_load, 1)
            print(f"low load: {rate}/s for {args.low_load_seconds:g} s", flush=True)
            results["low_load"] = await low_load(setup, rate, args.low_load_seconds,
                                                 LOW_LATENCY_MS)
            print(f"  {results['low_load']}", flush=True)
    finally:
        pgadmin.drop_database(args.database_url, setup.template)
    facts["load_average_at_end"] = machine.load_average()
    for against in report.PAIRED:
        results[f"pair_summary_{against}"] = report.pair_summary(results["pairs"], against)
    results["pair_summary"] = results.pop("pair_summary_peer")
    results["pair_cpu_summary"] = report.pair_cpu_summary(results["pairs"])
    return results


def main(argv: list[str] | None = None) -> None:
    # SIGTERM unwinds like Ctrl-C, so the started processes and databases are cleaned up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    extra = {"--low-load": 0.0, "--low-load-seconds": 20.0, "--low-load-top": 150.0,
             "--idle-seconds": 0.0}
    argv = list(sys.argv[1:] if argv is None else argv)
    values = dict(extra)
    for flag in extra:
        if flag in argv:
            at = argv.index(flag)
            values[flag] = float(argv[at + 1])
            del argv[at:at + 2]
    args = run.parse_args(argv)
    for flag, value in values.items():
        setattr(args, flag.lstrip("-").replace("-", "_"), value)
    args.customer_token = secrets.token_urlsafe(8)
    results = asyncio.run(main_async(args))
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "compare.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    (args.results / "compare.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
