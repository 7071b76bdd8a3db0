"""PostgreSQL's own limit on this machine: `pgbench -N` TPS, or a psycopg loop without pgbench."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import threading
import time
from typing import Any

import psycopg

from bench import pgadmin

CLIENTS = 8
ROWS = 100_000


def measure(server_url: str, dbname: str, *, seconds: float, scale: int) -> dict[str, Any]:
    """TPS of one-row update transactions at 8 clients on a fresh database (dropped after)."""
    url = pgadmin.create_database(server_url, dbname)
    try:
        if shutil.which("pgbench"):
            return _pgbench(url, seconds=seconds, scale=scale)
        return _psycopg_loop(url, seconds=seconds)
    finally:
        pgadmin.drop_database(server_url, dbname)


def _pgbench(url: str, *, seconds: float, scale: int) -> dict[str, Any]:
    init = ["pgbench", "-i", "-q", "-s", str(scale), url]
    subprocess.run(init, capture_output=True, text=True, check=True, timeout=600)
    argv = ["pgbench", "-N", "-c", str(CLIENTS), "-j", "2", "-T", str(round(seconds)), url]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=seconds + 120)
    pattern = r"tps = ([0-9.]+) \((?:without initial connection time|excluding)"
    found = re.search(pattern, done.stdout)
    if found is None:
        raise RuntimeError(f"cannot read pgbench's TPS:\n{done.stdout}")
    return {
        "tool": "pgbench",
        "command": " ".join([*argv[:-1], "<database>"]),
        "scale": scale,
        "clients": CLIENTS,
        "seconds": seconds,
        "tps": round(float(found.group(1)), 1),
    }


def _psycopg_loop(url: str, *, seconds: float) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE ceiling (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0)")
        conn.execute("INSERT INTO ceiling (id) SELECT generate_series(1, %s)", (ROWS,))
    counts = [0] * CLIENTS
    deadline = time.monotonic() + seconds

    def client(index: int) -> None:
        rng = random.Random(index)
        with psycopg.connect(url, autocommit=True) as conn:
            while time.monotonic() < deadline:
                conn.execute("UPDATE ceiling SET v = v + 1 WHERE id = %s", (rng.randint(1, ROWS),))
                counts[index] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {
        "tool": "psycopg loop (pgbench not found)",
        "command": "UPDATE ceiling SET v = v + 1 WHERE id = $random, autocommit",
        "clients": CLIENTS,
        "seconds": seconds,
        "tps": round(sum(counts) / seconds, 1),
    }
