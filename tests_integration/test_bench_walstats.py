"""The benchmark's reading of the WAL: one database's records added up, by relation and record
kind, from `pg_waldump`'s lines (canned, and a real window on the test server)."""

from __future__ import annotations

import psycopg
import pytest

from bench import walstats


def _line(rmgr: str, rec: int, tot: int, tx: int, desc: str) -> str:
    """One line as `pg_waldump` prints it (the LSNs do not matter here)."""
    return (f"rmgr: {rmgr:<11} len (rec/tot): {rec:6}/{tot:6}, tx: {tx:10}, "
            f"lsn: 0/01000028, prev 0/01000000, desc: {desc}")


DUMP = "\n".join([
    _line("Heap", 79, 79, 801, "INSERT off 3 flags 0x00, blkref #0: rel 1663/5/16400 blk 0"),
    _line("Heap", 79, 8019, 801, "INSERT off 1 flags 0x00, blkref #0: rel 1663/5/16400 blk 1 FPW"),
    _line("Btree", 64, 64, 801, "INSERT_LEAF off 2, blkref #0: rel 1663/5/16405 blk 1"),
    _line("Heap", 79, 79, 802, "INSERT off 4 flags 0x00, blkref #0: rel 1663/9/16400 blk 0"),
    _line("Transaction", 34, 34, 801, "COMMIT 2026-12-01 21:32:28.528336 UTC"),
    _line("Transaction", 34, 34, 802, "COMMIT 2026-12-01 21:32:28.533410 UTC"),
])


def test_a_dump_is_added_up_for_its_database_by_relation_and_record() -> None:
    read = walstats.parse_dump(DUMP, 5)
    assert read is not None
    # database 9's insert and its transaction's commit are not ours; 801's commit is
    assert read.bytes == 79 + 8019 + 64 + 34
    assert read.image_bytes == 8019 - 79
    assert read.kinds == {
        (16400, "Heap INSERT"): (2, 79 + 8019, 8019 - 79),
        (16405, "Btree INSERT_LEAF"): (1, 64, 0),
        (0, "Transaction COMMIT"): (1, 34, 0),
    }
    rows = walstats.breakdown(read, {16400: "outbox"}, orders=2)
    assert rows[0] == {"relation": "outbox", "record": "Heap INSERT", "records": 1.0,
                       "bytes": 4049, "image_bytes": 3970}
    assert [(r["relation"], r["record"]) for r in rows[1:]] == [
        ("16405", "Btree INSERT_LEAF"), ("-", "Transaction COMMIT")]


def test_the_rows_past_the_shown_kinds_are_summed_into_one() -> None:
    kinds = {(1000 + n, "Heap INSERT"): (1, 100 + n, 0) for n in range(walstats.BREAKDOWN_ROWS + 3)}
    read = walstats.WalRead(sum(b for _, b, _ in kinds.values()), 0, kinds)
    rows = walstats.breakdown(read, {}, orders=1)
    assert len(rows) == walstats.BREAKDOWN_ROWS + 1
    assert rows[-1]["relation"] == "(the rest)"
    assert rows[-1]["record"] == "3 kinds"
    assert rows[-1]["bytes"] == 100 + 101 + 102  # the three smallest
    assert sum(r["bytes"] for r in rows) == read.bytes


@pytest.mark.postgres
def test_a_real_window_names_the_table_written(admin_url: str, pg_url: str) -> None:
    name = psycopg.conninfo.conninfo_to_dict(pg_url)["dbname"]
    assert isinstance(name, str)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE walstats_probe (n integer)")
    before = walstats.snapshot(admin_url, name)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for n in range(10):
            conn.execute("INSERT INTO walstats_probe VALUES (%s)", (n,))
    after = walstats.snapshot(admin_url, name)
    read = walstats.database_wal(before, after)
    if read is None:
        pytest.skip("this server's WAL or pg_waldump is not readable here")
    rows = walstats.breakdown(read, walstats.relation_names(pg_url), orders=1)
    inserts = [r for r in rows if r["relation"] == "walstats_probe"]
    assert sum(r["records"] for r in inserts) == 10
    assert {r["record"] for r in inserts} <= {"Heap INSERT", "Heap INSERT+INIT"}
    commits = [r for r in rows if r["record"] == "Transaction COMMIT"]
    assert [c["records"] for c in commits] == [10]
