"""Where the CPU goes: CPU seconds of every process of a run, read at both ends of the load.

Orders per second alone cannot say whether the API, a worker, PostgreSQL or the bench itself
is the bottleneck on a box this small; CPU milliseconds per order, next to what the cores
offer per order at the measured rate, can.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import attrs
import psycopg

from bench import launch

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
# Fields of /proc/PID/stat after the `)` that closes the command name (which may hold spaces
# and parentheses): field N of proc(5) is index N − 3 there.
PPID, UTIME, STIME, CUTIME, CSTIME = 1, 11, 12, 13, 14
POSTGRES = "postgres"
LOAD_GENERATOR = "load_generator"
# What `figures` adds to a run's results (the soak copies them into its section).
FIELDS = ("cpu_window_s", "cpu_ms_per_order", "cpu_total_ms_per_order", "cpu_note")


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name; None once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _ticks(fields: list[str], *which: int) -> int:
    return sum(int(fields[i]) for i in which)


def process_cpu_s(pid: int) -> float | None:
    """utime + stime of one process in seconds (all its threads); None once it is gone."""
    fields = _stat(pid)
    return None if fields is None else _ticks(fields, UTIME, STIME) / TICKS_PER_S


def self_cpu_s() -> float:
    """User + system CPU of the bench process itself: the customers, the watcher, the
    sampler. Its children (the processes under test) are read on their own, so the
    `children_*` fields of os.times() are left out."""
    t = os.times()
    return t.user + t.system


@attrs.frozen
class Postgres:
    """The postmaster whose CPU is counted, or why there is none (`note`)."""

    postmaster: int | None
    note: str | None = None


def _is_local(host: str) -> bool:
    """A unix socket (a directory, or the libpq default) or a loopback address."""
    return not host or host.startswith("/") or host in LOCAL_HOSTS


def _is_postmaster(pid: int) -> bool:
    """A `postgres` process whose parent is not one: the server's root, not a backend."""
    fields = _stat(pid)
    return (fields is not None and _comm(pid).startswith(POSTGRES)
            and not _comm(int(fields[PPID])).startswith(POSTGRES))


def locate_postgres(server_url: str) -> Postgres:
    """The postmaster of the server at `server_url`, found as the parent of a backend of our
    own: a machine may run more than one cluster (a second one on another port was seen here),
    and summing every `postgres` process would count a neighbour's work."""
    with psycopg.connect(server_url, autocommit=True, connect_timeout=10) as conn:
        host = conn.info.host
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        # Read the backend while its connection is open: once closed, it exits, and a read
        # after that found nothing now and then (PostgreSQL's CPU silently counted as 0).
        fields = _stat(int(row[0])) if row else None
        backend_is_postgres = bool(row) and _comm(int(row[0])).startswith(POSTGRES)
    if not _is_local(host):
        return Postgres(None, f"PostgreSQL at {host} is not on this machine: its CPU is "
                              "not counted")
    parent = int(fields[PPID]) if fields else 0
    if not (fields and backend_is_postgres and _is_postmaster(parent)):
        return Postgres(None, "the server's processes are not visible in /proc (another PID "
                              "namespace?): PostgreSQL's CPU is not counted")
    return Postgres(parent)


def _children(parent: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[PPID]) == parent:
                kids.append(int(entry.name))
    return kids


def postgres_cpu_s(postmaster: int, attempts: int = 5) -> float:
    """A counter of the server's CPU that only grows: the postmaster's own and reaped
    children's time (cutime + cstime: backends that closed, whatever they used) plus the time
    of every live child (backends, checkpointer, walwriter, autovacuum, …).

    A backend that exits and is reaped between the postmaster's read and the scan of its
    children would be in neither (a run's end, when the peer closes its connections, lost
    150 ms that way and the total came out below one process's share), so the scan is taken
    again until the postmaster's reaped time is the same before and after it."""
    ticks = 0
    for _ in range(attempts):
        before = _stat(postmaster)
        if before is None:
            return 0.0
        ticks = _ticks(before, UTIME, STIME, CUTIME, CSTIME)
        for pid in _children(postmaster):
            kid = _stat(pid)
            if kid is not None and _comm(pid).startswith(POSTGRES):
                ticks += _ticks(kid, UTIME, STIME)
        after = _stat(postmaster)
        if after is None or _ticks(after, CUTIME, CSTIME) == _ticks(before, CUTIME, CSTIME):
            break
    return ticks / TICKS_PER_S


@attrs.frozen
class Reading:
    """CPU seconds used so far by each process (`api`, `worker0…`, `mocks`, `postgres`,
    `load_generator`), taken at monotonic time `at`."""

    at: float
    cpu_s: dict[str, float]


def read(nodes: dict[str, launch.Node], pg: Postgres) -> Reading:
    """One reading of every counter; a process already gone is left out."""
    cpu: dict[str, float] = {}
    for role, node in nodes.items():
        used = process_cpu_s(node.pid)
        if used is not None:
            cpu[role] = used
    if pg.postmaster is not None:
        cpu[POSTGRES] = postgres_cpu_s(pg.postmaster)
    cpu[LOAD_GENERATOR] = self_cpu_s()
    return Reading(time.monotonic(), cpu)


def figures(start: Reading, end: Reading, orders: int, pg: Postgres) -> dict[str, Any]:
    """`cpu_ms_per_order` per process (CPU used between the readings ÷ accepted orders), its
    total, the window's length and, when PostgreSQL is not counted, why (`cpu_note`)."""
    per_order = {
        role: round((end.cpu_s[role] - start.cpu_s[role]) / orders * 1000, 2)
        for role in end.cpu_s if role in start.cpu_s
    } if orders else {}
    out: dict[str, Any] = {
        "cpu_window_s": round(end.at - start.at, 2),
        "cpu_ms_per_order": per_order,
        "cpu_total_ms_per_order": round(sum(per_order.values()), 2) if per_order else None,
    }
    if pg.note:
        out["cpu_note"] = pg.note
    return out


def capacity_ms_per_order(cores: int | None, orders_per_s: float | None) -> float | None:
    """CPU milliseconds the machine offers per order at the measured rate: what the total is
    to be read against (a total near it means the box, not a lock or a sleep, is the limit)."""
    if not cores or not orders_per_s:
        return None
    return round(cores * 1000 / orders_per_s, 2)
