"""What one database wrote to the WAL and its row counters, between two points of a run.

The server-wide WAL position (`pg_current_wal_lsn()`) also counts whatever else the server did
meanwhile (on a shared machine, other people's tests). When the server is local and readable
(its data directory and `pg_waldump` are here), the WAL between the two positions is read and
only this database's records are added up: records on its relations, and every record of a
transaction that touched it (commit records carry no relation). Without `pg_stat_statements`
preloaded (a server restart), statements are not counted server-side; rows written are.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import subprocess
from typing import Any

import psycopg

_RECORD = re.compile(r"^rmgr: \S+\s+len \(rec/tot\):\s*\d+/\s*(\d+), tx:\s*(\d+), .*desc: (.*)$")


def _admin(server_url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(server_url, autocommit=True, connect_timeout=10)


def checkpoint(server_url: str) -> None:
    """Start the measured window right after a checkpoint, so every run pays the full-page
    images of its first touches alike (otherwise WAL per order depends on when the server's
    last checkpoint happened)."""
    # Not allowed for this role: the numbers are noisier, not wrong.
    with _admin(server_url) as conn, contextlib.suppress(psycopg.Error):
        conn.execute("CHECKPOINT")


def snapshot(server_url: str, name: str) -> dict[str, Any]:
    """The WAL position and the database's commit and row counters, now."""
    with _admin(server_url) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT pg_current_wal_lsn()::text, d.oid, s.xact_commit,"
            " s.tup_inserted + s.tup_updated + s.tup_deleted"
            " FROM pg_database AS d JOIN pg_stat_database AS s ON s.datid = d.oid"
            " WHERE d.datname = %s",
            (name,),
        ).fetchone()
        data_dir = None
        try:
            found = conn.execute("SHOW data_directory").fetchone()
            data_dir = found[0] if found else None
        except psycopg.Error:
            pass
    if row is None:
        raise LookupError(f"no database {name!r}")
    lsn, oid, xacts, rows = row
    return {"lsn": lsn, "oid": oid, "xacts": xacts, "rows": rows, "data_dir": data_dir}


def _lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


def _waldump() -> str | None:
    found = shutil.which("pg_waldump")
    if found:
        return found
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_waldump"))
    return candidates[-1] if candidates else None


def database_wal_bytes(before: dict[str, Any], after: dict[str, Any]) -> int | None:
    """This database's WAL bytes between two snapshots, or None if the WAL cannot be read."""
    tool = _waldump()
    wal_dir = os.path.join(after["data_dir"] or "", "pg_wal")
    if tool is None or not after["data_dir"] or not os.access(wal_dir, os.R_OK):
        return None
    done = subprocess.run(
        [tool, "-p", wal_dir, "-s", before["lsn"], "-e", after["lsn"]],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    oid = after["oid"]
    mine = re.compile(rf"(rel \d+/{oid}/|db {oid}\b)")
    records: list[tuple[int, int, bool]] = []
    xids: set[int] = set()
    for line in done.stdout.splitlines():
        match = _RECORD.match(line)
        if match is None:
            continue
        size, xid, ours = int(match[1]), int(match[2]), bool(mine.search(match[3]))
        records.append((size, xid, ours))
        if ours and xid:
            xids.add(xid)
    if not records:
        print(f"walstats: pg_waldump read nothing: {done.stderr.strip()[:300]}")
        return None
    return sum(size for size, xid, ours in records if ours or (xid and xid in xids))


def per_order(before: dict[str, Any], after: dict[str, Any], orders: int) -> dict[str, Any]:
    """WAL bytes (this database's, and the server's in the same window), transactions and
    rows written, each per order."""
    mine = database_wal_bytes(before, after)
    return {
        "wal_bytes_per_order": round(mine / orders) if mine is not None else None,
        "server_wal_bytes_per_order": round((_lsn(after["lsn"]) - _lsn(before["lsn"])) / orders),
        "rows_written_per_order": round((after["rows"] - before["rows"]) / orders, 1),
    }
