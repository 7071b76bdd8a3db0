"""Running a peer job queue on the same server, against the same simulated services."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from pathlib import Path
from typing import Any

from bench import launch, peer_env, pgadmin

SCRIPT = Path(__file__).resolve().parent / "peer_chains.py"


async def run(
    setup: Any, system: str, *, latency: int, orders: int, concurrency: int
) -> dict[str, Any]:
    """One peer run: its own fresh database, its own mocks process, one worker process."""
    name = f"peer_{system.replace('-', '_')}_{latency}"
    dbname = f"{setup.db_prefix}{name}"
    db_url = pgadmin.create_database(setup.server_url, dbname)
    port = launch.free_port()
    env = {"ORDERFLOW_MOCKS_PORT": str(port), "ORDERFLOW_MOCKS_LATENCY_MS": str(latency)}
    mocks = launch.Node(f"{name}-mocks", launch.command_for(setup.launcher, "mocks"), env)
    try:
        await launch.wait_for_port(mocks, port)
        argv = [str(peer_env.python()), str(SCRIPT), system, db_url, f"http://127.0.0.1:{port}",
                str(orders), str(concurrency)]
        worker = launch.Node(f"{name}-worker", argv, {})
        deadline = time.monotonic() + setup.timeout_s + 60
        rss = 0.0
        while worker.proc.poll() is None and time.monotonic() < deadline:
            rss = max(rss, worker.peak_rss_mib())
            await asyncio.sleep(0.2)
        if worker.proc.poll() is None:
            worker.stop()
            return {"system": system, "mocks_latency_ms": latency, "error": "timed out"}
        if worker.proc.returncode != 0:
            tail = worker.log_path.read_text()[-1500:]
            error = f"exit {worker.proc.returncode}: {tail}"
            return {"system": system, "mocks_latency_ms": latency, "error": error}
        lines = [ln for ln in worker.log_path.read_text().splitlines() if ln.startswith("{")]
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
