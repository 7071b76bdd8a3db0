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

import attrs
import psycopg

_RECORD = re.compile(
    r"^rmgr: (\S+)\s+len \(rec/tot\):\s*(\d+)/\s*(\d+), tx:\s*(\d+), .*desc: (.*)$"
)
# How many record kinds the breakdown names; the rest are summed into one row.
BREAKDOWN_ROWS = 15


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


@attrs.frozen
class WalRead:
    """This database's WAL in a window: bytes, the part of them that is full-page images, and
    per record kind (relfilenode or 0, `<rmgr> <record>`) its count, bytes and image bytes."""

    bytes: int
    image_bytes: int
    kinds: dict[tuple[int, str], tuple[int, int, int]]


def database_wal(before: dict[str, Any], after: dict[str, Any]) -> WalRead | None:
    """This database's WAL between two snapshots (`WalRead`), or None if unreadable."""
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
    read = parse_dump(done.stdout, after["oid"])
    if read is None:
        print(f"walstats: pg_waldump read nothing: {done.stderr.strip()[:300]}")
    return read


def parse_dump(text: str, oid: int) -> WalRead | None:
    """`pg_waldump`'s lines, added up for the database `oid`: records on its relations, and
    every record of a transaction that touched it (commit records carry no relation)."""
    mine = re.compile(rf"(rel \d+/{oid}/(\d+)|db {oid}\b)")
    records: list[tuple[int, int, int, bool, int, str]] = []
    xids: set[int] = set()
    for line in text.splitlines():
        match = _RECORD.match(line)
        if match is None:
            continue
        rmgr, desc = match[1], match[5]
        size, xid = int(match[3]), int(match[4])
        ours = mine.search(desc)
        image = size - int(match[2]) if " FPW" in desc else 0
        kind = f"{rmgr} {desc.split(' ', 1)[0].rstrip(',;')}"
        relation = int(ours[2]) if ours is not None and ours[2] else 0
        records.append((size, image, xid, ours is not None, relation, kind))
        if ours is not None and xid:
            xids.add(xid)
    if not records:
        return None
    kinds: dict[tuple[int, str], tuple[int, int, int]] = {}
    total = images = 0
    for size, image, xid, ours, relation, kind in records:
        if not (ours or (xid and xid in xids)):
            continue
        total, images = total + size, images + image
        count, sized, imaged = kinds.get((relation, kind), (0, 0, 0))
        kinds[(relation, kind)] = (count + 1, sized + size, imaged + image)
    return WalRead(total, images, kinds)


def relation_names(url: str) -> dict[int, str]:
    """The database's relations by file number (what `pg_waldump` names them by)."""
    with psycopg.connect(url, connect_timeout=10) as conn:
        found = conn.execute(
            "SELECT pg_relation_filenode(oid), relname FROM pg_class"
            " WHERE pg_relation_filenode(oid) IS NOT NULL"
        ).fetchall()
    return {int(node): str(name) for node, name in found}


def breakdown(read: WalRead, names: dict[int, str], orders: int) -> list[dict[str, Any]]:
    """Per order, the record kinds that wrote the most WAL (`BREAKDOWN_ROWS` of them, then the
    rest as one row): relation (`-` for none), record, records, bytes, full-page-image bytes."""
    rows = sorted(read.kinds.items(), key=lambda item: -item[1][1])
    shown = [
        {
            "relation": names.get(relation, str(relation)) if relation else "-",
            "record": kind,
            "records": round(count / orders, 2),
            "bytes": round(size / orders),
            "image_bytes": round(image / orders),
        }
        for (relation, kind), (count, size, image) in rows[:BREAKDOWN_ROWS]
    ]
    rest = rows[BREAKDOWN_ROWS:]
    if rest:
        shown.append({
            "relation": "(the rest)",
            "record": f"{len(rest)} kinds",
            "records": round(sum(c for _, (c, _, _) in rest) / orders, 2),
            "bytes": round(sum(b for _, (_, b, _) in rest) / orders),
            "image_bytes": round(sum(i for _, (_, _, i) in rest) / orders),
        })
    return shown


def per_order(
    before: dict[str, Any], after: dict[str, Any], orders: int, read: WalRead | None
) -> dict[str, Any]:
    """WAL bytes (this database's, as `database_wal` read them between the two snapshots, None
    if it could not; the part of them that is full-page images, the first change of each page
    after a checkpoint; and the server's in the same window) and rows written, each per order.
    The windows start after a CHECKPOINT, so the image share is largest in short runs; compare
    the bytes without images across runs of different length."""
    return {
        "wal_bytes_per_order": round(read.bytes / orders) if read is not None else None,
        "wal_fpi_bytes_per_order": round(read.image_bytes / orders) if read is not None else None,
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
