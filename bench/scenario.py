"""One measured configuration: fresh database, mocks, API, workers, load, numbers, teardown."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any

import attrs

from bench import cpu, launch, load, pgadmin, profiling, soak, statements, walstats
from bench.stats import latency_ms

SETTLE_S = 2.0


@attrs.frozen
class Setup:
    """What every scenario of a run shares."""

    launcher: str
    server_url: str
    template: str
    db_prefix: str
    customer_token: str
    operator_token: str
    concurrency: int
    clients: int
    timeout_s: float
    # The newest change of the orders the template was filled with (`bench/prefill.py`): only
    # orders created after it are the run's.
    since: datetime | None = None


@attrs.frozen
class Load:
    """Closed loop (`orders` set: as fast as accepted) or open loop (`rate` for `seconds`)."""

    orders: int = 0
    rate: float = 0.0
    seconds: float = 0.0

    def describe(self) -> str:
        if self.rate:
            return f"open loop {self.rate:g}/s for {self.seconds:g} s"
        return f"closed loop, {self.orders} orders"


@attrs.define
class Nodes:
    mocks: launch.Node
    api: launch.Node
    workers: list[launch.Node]
    mocks_port: int
    api_port: int
    worker_metrics_ports: list[int] = attrs.Factory(list)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def metrics_urls(self) -> list[str]:
        """The API's and each worker's `/metrics` base URL (a worker serves its own)."""
        return [self.api_url, *(f"http://127.0.0.1:{p}" for p in self.worker_metrics_ports)]

    def all(self) -> list[launch.Node]:
        return [self.mocks, self.api, *self.workers]

    def by_role(self, name: str) -> dict[str, launch.Node]:
        """`api`, `worker0…`, `mocks`: the node names without the scenario's prefix."""
        return {n.name.removeprefix(f"{name}-"): n for n in self.all()}


@contextlib.contextmanager
def _started(
    setup: Setup, name: str, db_url: str, latency: int, workers: int,
    env: dict[str, str] | None = None,
) -> Iterator[Nodes]:
    mocks_port, api_port = launch.free_port(), launch.free_port()
    mocks_url = f"http://127.0.0.1:{mocks_port}"
    base = {
        "ORDERFLOW_DATABASE_URL": db_url,
        "ORDERFLOW_CUSTOMER_TOKEN": setup.customer_token,
        "ORDERFLOW_OPERATOR_TOKEN": setup.operator_token,
        "ORDERFLOW_WAREHOUSE_URL": mocks_url,
        "ORDERFLOW_PAYMENTS_URL": mocks_url,
        "ORDERFLOW_SHIPPING_URL": mocks_url,
        "ORDERFLOW_MAX_CONCURRENT_STEPS": str(setup.concurrency),
        # Reserve, charge, ship: the three chained jobs the peers run per order.
        "ORDERFLOW_PROCESS_VERSION": "1",
        **(env or {}),  # a run's own settings (bench/longhorizon.py: pruning on or off)
    }
    started: list[launch.Node] = []

    def start(role: str, node: str, env: dict[str, str]) -> launch.Node:
        argv = launch.command_for(setup.launcher, role)
        started.append(launch.Node(f"{name}-{node}", argv, {**base, **env}))
        return started[-1]

    try:
        mocks = start("mocks", "mocks", {
            "ORDERFLOW_MOCKS_PORT": str(mocks_port),
            "ORDERFLOW_MOCKS_LATENCY_MS": str(latency),
        })
        api = start("api", "api", {"ORDERFLOW_HTTP_PORT": str(api_port)})
        nodes = Nodes(mocks, api, [], mocks_port, api_port)
        for i in range(workers):
            port = launch.free_port()
            nodes.worker_metrics_ports.append(port)
            nodes.workers.append(start("worker", f"worker{i}", {
                "ORDERFLOW_WORKER_ID": f"w{i}", "ORDERFLOW_METRICS_PORT": str(port),
            }))
        yield nodes
    finally:
        for node in reversed(started):
            node.stop()


async def _drive(
    setup: Setup, nodes: Nodes, db_url: str, load_spec: Load
) -> tuple[list[load.Posted], load.Watch]:
    expected: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    seen = load.Watch()
    watcher = asyncio.create_task(load.watch(
        db_url, expected, seen, timeout_s=setup.timeout_s, since=setup.since))
    try:
        if load_spec.rate:
            posted = await load.open_loop(
                nodes.api_url, setup.customer_token, rate=load_spec.rate, seconds=load_spec.seconds
            )
        else:
            posted = await load.closed_loop(
                nodes.api_url, setup.customer_token, orders=load_spec.orders, clients=setup.clients
            )
        expected.set_result(sum(1 for p in posted if p.status == 202))
        await watcher
    finally:
        watcher.cancel()
    return posted, seen


async def _drive_sampled(
    setup: Setup, nodes: Nodes, db_url: str, load_spec: Load, rss: dict[str, launch.Node],
    every_s: float,
) -> tuple[list[load.Posted], load.Watch, list[soak.Sample]]:
    """`_drive` with the resident set of every process sampled until the last order stopped."""
    stop = asyncio.Event()
    sampler = asyncio.create_task(soak.sample_rss(rss, every_s, stop))
    try:
        posted, seen = await _drive(setup, nodes, db_url, load_spec)
    finally:
        stop.set()
        samples = await sampler
    return posted, seen, samples


async def run(
    setup: Setup, name: str, *, latency: int, workers: int, load_spec: Load,
    profile_to: str | None = None, rss_every_s: float = 0.0,
    env: dict[str, str] | None = None,
    after: Callable[[str, str], Awaitable[None]] | None = None,
    in_place: bool = False,
) -> dict[str, Any]:
    """Measure one configuration on its own fresh database; the figures of the report.

    With `rss_every_s`, also the resident set of each process over the run (`rss_samples`).
    Always the CPU each process used from the start of the load to its end (`cpu_*`).
    With `in_place`, the run uses the template database itself and keeps it (a database of
    many gigabytes, which a copy per run would spend minutes and its size in WAL on)."""
    dbname = setup.template if in_place else f"{setup.db_prefix}{name}"
    db_url = (pgadmin.db_url(setup.server_url, dbname) if in_place
              else pgadmin.create_database(setup.server_url, dbname, template=setup.template))
    pg = cpu.locate_postgres(setup.server_url)
    window = walstats.WalWindow(setup.server_url)
    try:
        with window:
            with _started(setup, name, db_url, latency, workers, env) as nodes:
                await launch.wait_for_port(nodes.mocks, nodes.mocks_port)
                await launch.wait_for_port(nodes.api, nodes.api_port)
                if setup.launcher == "cli":  # the stand-in node serves no /metrics
                    for worker, port in zip(nodes.workers, nodes.worker_metrics_ports, strict=True):
                        await launch.wait_for_port(worker, port)  # its /metrics: it is up
                await asyncio.sleep(SETTLE_S)  # let start-up (imports, pools) settle
                # The CPU (and WAL) window starts here, once start-up (imports, pools) is over.
                window.open()
                wal_start = walstats.snapshot(setup.server_url, dbname)
                cpu_start = cpu.read(nodes.by_role(name), pg)
                sent_start = await statements.read(nodes.metrics_urls)
                spy = profiling.start(nodes.workers[0].pid, profile_to) if profile_to else None
                samples: list[soak.Sample] | None = None
                if rss_every_s:
                    posted, seen, samples = await _drive_sampled(
                        setup, nodes, db_url, load_spec, nodes.by_role(name), rss_every_s)
                else:
                    posted, seen = await _drive(setup, nodes, db_url, load_spec)
                profile = profiling.finish(spy) if spy else None
                rss = {role: n.peak_rss_mib() for role, n in nodes.by_role(name).items()}
                cpu_end = cpu.read(nodes.by_role(name), pg)
                sent_end = await statements.read(nodes.metrics_urls)
                for node in nodes.all():
                    node.check_alive()
                if after is not None:  # e.g. reads on the loaded database, the API still up
                    await after(db_url, nodes.api_url)
            pgadmin.wait_no_sessions(setup.server_url, dbname)
            wal_end = walstats.snapshot(setup.server_url, dbname)
            wal_read = walstats.database_wal(wal_start, wal_end)  # while still kept
        commits = wal_end["xacts"] - seen.polls
        outcome = await load.outcome_counts(db_url, setup.since)
        names = walstats.relation_names(db_url) if wal_read is not None else {}
    finally:
        if not in_place:
            pgadmin.drop_database(setup.server_url, dbname)
    figures = _figures(load_spec, latency, workers, setup, posted, seen, commits, outcome, rss,
                       profile)
    figures.update(cpu.figures(cpu_start, cpu_end, figures["orders_accepted"], pg))
    if figures["orders_accepted"]:
        accepted = figures["orders_accepted"]
        figures.update(walstats.per_order(wal_start, wal_end, accepted, wal_read))
        figures.update(statements.per_order(sent_start, sent_end, accepted))
        if wal_read is not None:
            figures["wal_records_per_order"] = walstats.breakdown(wal_read, names, accepted)
    if samples is not None:
        figures["rss_samples"] = [attrs.asdict(s) for s in samples]
    return figures


def _figures(
    load_spec: Load, latency: int, workers: int, setup: Setup, posted: list[load.Posted],
    seen: load.Watch, commits: int, outcome: dict[str, Any], rss: dict[str, float],
    profile: dict[str, Any] | None,
) -> dict[str, Any]:
    accepted = [p for p in posted if p.status == 202]
    first = min((p.started for p in posted), default=time.monotonic())
    last_post = max((p.started + p.latency_s for p in posted), default=first)
    elapsed = (seen.finished or time.monotonic()) - first
    shipped = outcome["states"].get("shipped", 0)
    figures: dict[str, Any] = {
        "load": load_spec.describe(),
        "offered_rate": load_spec.rate or None,
        "mocks_latency_ms": latency,
        "workers": workers,
        "concurrency_per_worker": setup.concurrency,
        "orders_posted": len(posted),
        "orders_accepted": len(accepted),
        "post_errors": {str(s): sum(1 for p in posted if p.status == s)
                        for s in sorted({p.status for p in posted} - {202})},
        "completed": seen.finished is not None,
        "states": outcome["states"],
        "elapsed_s": round(elapsed, 2),
        "post_phase_s": round(last_post - first, 2),
        "orders_per_s": round(shipped / elapsed, 1) if elapsed > 0 else None,
        "steps_per_s": round(outcome["attempts_finished"] / elapsed, 1) if elapsed > 0 else None,
        "xact_commit": commits,
        "xacts_per_order": round(commits / len(accepted), 2) if accepted else None,
        "post_latency_ms": latency_ms([p.latency_s for p in accepted]),
        "created_to_shipped_ms": latency_ms(outcome["flow_s"]),
        "peak_rss_mib": rss,
        "row_writes_per_order": {
            table: {k: round(v / len(accepted), 2) for k, v in counts.items() if v}
            for table, counts in outcome["row_writes"].items()
        } if accepted else {},
    }
    figures["steps_per_s_per_worker"] = (
        round(figures["steps_per_s"] / workers, 1) if figures["steps_per_s"] else None
    )
    if profile is not None:
        figures["profile"] = profile
    return figures
