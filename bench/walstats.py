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

_RECORD = re.compile(r"^rmgr: \S+\s+len \(rec/tot\):\s*(\d+)/\s*(\d+), tx:\s*(\d+), .*desc: (.*)$")


def _admin(server_url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(server_url, autocommit=True, connect_timeout=10)


class WalWindow:
    """Keeps the WAL of a measured window readable until it is read: a temporary physical
    replication slot (dropped when this session ends) stops checkpoints from recycling the
    segments meanwhile. The window starts after a CHECKPOINT, so every run pays the full-page
    images of its first touches alike (otherwise WAL per order depends on when the server's
    last checkpoint happened). A role that may do neither gets noisier numbers, not wrong ones.
    """

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self._conn: psycopg.Connection[Any] | None = None

    def open(self) -> None:
        """Reserve the WAL from now on and checkpoint; the window starts after this."""
        if self._conn is not None:
            return
        self._conn = _admin(self.server_url)
        with contextlib.suppress(psycopg.Error):
            self._conn.execute(
                "SELECT pg_create_physical_replication_slot("
                "'orderflow_bench_' || pg_backend_pid(), true, true)"
            )
        with contextlib.suppress(psycopg.Error):
            self._conn.execute("CHECKPOINT")

    def close(self) -> None:
        """Let the WAL go (the temporary slot ends with its session)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> WalWindow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
    split = database_wal_split(before, after)
    return split[0] if split is not None else None


def database_wal_split(before: dict[str, Any], after: dict[str, Any]) -> tuple[int, int] | None:
    """This database's WAL bytes between two snapshots and the part of them that is full-page
    images (the first change of each page after a checkpoint), or None if unreadable."""
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
    records: list[tuple[int, int, int, bool]] = []
    xids: set[int] = set()
    for line in done.stdout.splitlines():
        match = _RECORD.match(line)
        if match is None:
            continue
        size, xid, ours = int(match[2]), int(match[3]), bool(mine.search(match[4]))
        image = size - int(match[1]) if " FPW" in match[4] else 0
        records.append((size, image, xid, ours))
        if ours and xid:
            xids.add(xid)
    if not records:
        print(f"walstats: pg_waldump read nothing: {done.stderr.strip()[:300]}")
        return None
    kept = [(size, image) for size, image, xid, ours in records if ours or (xid and xid in xids)]
    return sum(size for size, _ in kept), sum(image for _, image in kept)


def per_order(
    before: dict[str, Any],
    after: dict[str, Any],
    orders: int,
    mine: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """WAL bytes (this database's — `mine` = (bytes, full-page-image bytes) if already read —,
    the part of them that is full-page images, and the server's in the same window) and rows
    written, each per order. The windows start after a CHECKPOINT, so the image share is
    largest in short runs; compare the bytes without images across runs of different length."""
    if mine is None:
        mine = database_wal_split(before, after)
    return {
        "wal_bytes_per_order": round(mine[0] / orders) if mine is not None else None,
        "wal_fpi_bytes_per_order": round(mine[1] / orders) if mine is not None else None,
        "server_wal_bytes_per_order": round((_lsn(after["lsn"]) - _lsn(before["lsn"])) / orders),
        "rows_written_per_order": round((after["rows"] - before["rows"]) / orders, 1),
    }


def hot_updates(url: str) -> dict[str, Any]:
    """Per table of the database at `url`: updates, and the share that were HOT (no index
    entries written)."""
    with _admin(url) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        found = conn.execute(
            "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
            " WHERE relname IN ('orders', 'workflow_steps')"
        ).fetchall()
    return {name: (updates, hot) for name, updates, hot in found}


def hot_share(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The share of each table's updates in the window that were HOT."""
    shares: dict[str, Any] = {}
    for name, (updates, hot) in after.items():
        updates0, hot0 = before.get(name, (0, 0))
        done = updates - updates0
        shares[f"{name}_hot_update_share"] = round((hot - hot0) / done, 2) if done else None
    return shares
