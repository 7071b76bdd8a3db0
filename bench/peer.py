"""Running a peer (a job queue, DBOS) or the cost floor on the same server, against the same
simulated services, with the CPU of every process read at both ends of its load."""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench import cpu, launch, peer_env, pgadmin

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "peer_chains.py"
DBOS_SCRIPT = HERE / "peer_dbos.py"
FLOOR = "floor"
# DBOS's queue polling interval (its default is 1 s: a queued workflow waits up to a second
# before a worker takes it). The bench's default; `--dbos-polling` changes it.
DBOS_POLLING_S = 0.01
# Its mode: `async` workflows and steps on one event loop, or `sync` ones (threads). Which is
# faster here is measured (docs/benchmark.md); `--dbos-mode` changes it.
DBOS_MODE = "async"
# Workflows enqueued per transaction (1: one enqueue, one transaction, per order).
DBOS_ENQUEUE_BATCH = 100
POLL_S = 0.05


def argv_for(system: str, db_url: str, mocks_url: str, orders: int, concurrency: int,
             options: dict[str, Any] | None = None) -> list[str]:
    """The command line of one peer run: `floor` on orderflow's own interpreter (the libraries
    our processes use), `dbos…` and the job queues in bench/.peer-venv."""
    common = [db_url, mocks_url, str(orders), str(concurrency)]
    opts = options or {}
    if system == FLOOR:
        rate = opts.get("floor_rate")
        return [sys.executable, "-m", "bench.floor", *common, *([str(rate)] if rate else [])]
    if system.startswith("dbos"):
        return [str(peer_env.python()), str(DBOS_SCRIPT), *common,
                str(opts.get("dbos_polling_s", DBOS_POLLING_S)),
                str(opts.get("dbos_mode", DBOS_MODE)),
                str(opts.get("dbos_enqueue_batch", DBOS_ENQUEUE_BATCH))]
    return [str(peer_env.python()), str(SCRIPT), system, *common]


def _markers(log: Path) -> dict[str, float]:
    """The `{"load": …, "cpu_s": …}` lines a peer printed so far: its own CPU at each."""
    found = {}
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith('{"load"'):
            marker = json.loads(line)
            found[marker["load"]] = float(marker["cpu_s"])
    return found


def _read(mocks: launch.Node, pg: cpu.Postgres, worker_cpu_s: float) -> cpu.Reading:
    """The mocks' and PostgreSQL's CPU now, with the peer's own as it printed it (exact even
    when the peer exits before the next look at its log)."""
    reading = cpu.read({"mocks": mocks}, pg)
    return cpu.Reading(reading.at, {**reading.cpu_s, "worker": worker_cpu_s})


async def run(
    setup: Any, system: str, *, latency: int, orders: int, concurrency: int,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One peer run: its own fresh database, its own mocks process, one worker process. The
    CPU of the mocks and PostgreSQL is read when the peer prints `{"load": "start"}` and
    `{"load": "end"}` (its log is looked at every POLL_S), the peer's own is in the line."""
    name = f"peer_{system.replace('-', '_')}_{latency}"
    dbname = f"{setup.db_prefix}{name}"
    db_url = pgadmin.create_database(setup.server_url, dbname)
    pg = cpu.locate_postgres(setup.server_url)
    port = launch.free_port()
    env = {"ORDERFLOW_MOCKS_PORT": str(port), "ORDERFLOW_MOCKS_LATENCY_MS": str(latency)}
    mocks = launch.Node(f"{name}-mocks", launch.command_for(setup.launcher, "mocks"), env)
    readings: dict[str, cpu.Reading] = {}
    try:
        await launch.wait_for_port(mocks, port)
        argv = argv_for(system, db_url, f"http://127.0.0.1:{port}", orders, concurrency, options)
        worker = launch.Node(f"{name}-worker", argv, {})
        deadline = time.monotonic() + setup.timeout_s + 60
        rss = 0.0
        while worker.proc.poll() is None and time.monotonic() < deadline:
            rss = max(rss, worker.peak_rss_mib())
            for marker, used in _markers(worker.log_path).items():
                readings.setdefault(marker, _read(mocks, pg, used))
            await asyncio.sleep(POLL_S)
        for marker, used in _markers(worker.log_path).items():  # printed in the last POLL_S
            readings.setdefault(marker, _read(mocks, pg, used))
        if worker.proc.poll() is None:
            worker.stop()
            return {"system": system, "mocks_latency_ms": latency, "error": "timed out"}
        if worker.proc.returncode != 0:
            tail = worker.log_path.read_text()[-1500:]
            error = f"exit {worker.proc.returncode}: {tail}"
            return {"system": system, "mocks_latency_ms": latency, "error": error}
        lines = [ln for ln in worker.log_path.read_text().splitlines()
                 if ln.startswith("{") and not ln.startswith('{"load"')]
        result: dict[str, Any] = json.loads(lines[-1])
    finally:
        mocks.stop()
    pgadmin.wait_no_sessions(setup.server_url, dbname)
    commits = pgadmin.xact_commit(setup.server_url, dbname)
    pgadmin.drop_database(setup.server_url, dbname)
    result.update({
        "mocks_latency_ms": latency,
        "workers": 1,
        "concurrency": concurrency,
        "xact_commit": commits,
        "xacts_per_chain": round(commits / orders, 2),
        "peak_rss_mib": rss,
    })
    if options and system.startswith("dbos"):
        result["options"] = {k: v for k, v in options.items() if k.startswith("dbos")}
    if "start" in readings and "end" in readings:
        figures = cpu.figures(readings["start"], readings["end"], orders, pg)
        figures["cpu_ms_per_order"].pop(cpu.LOAD_GENERATOR, None)  # the bench only waits here
        per = figures["cpu_ms_per_order"]
        figures["cpu_total_ms_per_order"] = round(sum(per.values()), 2) if per else None
        result.update(figures)
    return result


@functools.cache
def ensure_installed() -> dict[str, str] | None:
    """The peers' versions once bench/.peer-venv is ready; None if it cannot be. Checked once
    per bench process: the profile (py-spy), the peer runs and the alternated pairs need it."""
    first = not peer_env.python().exists()
    print(f"{'preparing' if first else 'checking'} {peer_env.VENV} (pip"
          f"{', first run takes a minute' if first else ''})…", flush=True)
    if not peer_env.ensure():
        return None
    return peer_env.versions()
