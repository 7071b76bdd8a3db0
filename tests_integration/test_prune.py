"""Retention: `orderflow prune`, the archive, the feed's floor, expired idempotency keys, and one
pruner at a time (docs/retention.md). Real PostgreSQL; orders made through the API and the
executor on a FakeClock, so the pruner's cutoffs are driven by moving that clock."""

from __future__ import annotations

import gzip
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import attrs
import psycopg
import pytest
from api_harness import ORDER_BODY, World, live, make_world
from processes import Proc, base_env, eventually, output_lines, run_cli

from orderflow.config import DAY_S, ConfigError, load_settings
from orderflow_core.errors import FeedCursorExpired
from orderflow_core.testing.clock import FakeClock
from orderflow_pg import PgOrderStore
from orderflow_pg.prune import (
    PRUNE_LOCK_KEY,
    STOP_AFTER_ARCHIVE,
    Policy,
    Pruner,
    archive_files,
    archived_orders,
    find_archived,
)

pytestmark = pytest.mark.postgres
Run = Any
DEFAULT = Policy(orders_s=90 * DAY_S, feed_s=7 * DAY_S, idempotency_s=DAY_S, audit_s=400 * DAY_S)
TABLES = (
    "orders",
    "workflow_steps",
    "finished_attempts",
    "refunds",
    "outbox",
    "audit_log",
    "api_idempotency",
    "processed_events",
)


def counts(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        return {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # type: ignore[index]
            for t in TABLES
        }


def shipped_orders(world: World, run: Run, n: int, *, key: str = "k") -> list[str]:
    """`n` orders created through the API and run to `shipped`, their events published."""
    with live(world, run=run) as api:
        ids = [api.create(key=f"{key}-{i}").body["order_id"] for i in range(n)]
        api.drive()
        for order_id in ids:
            assert api("GET", f"/api/v1/orders/{order_id}").body["state"] == "shipped"
    return ids


def test_a_dry_run_counts_what_would_go_and_a_pass_removes_it_in_batches_per_kind(
    pg_store: PgOrderStore, pg_url: str, run: Run, tmp_path: Path
) -> None:
    world = make_world(pg_store)
    ids = shipped_orders(world, run, 5)
    before = counts(pg_url)
    clock: FakeClock = world.clock
    clock.advance(91 * DAY_S)  # past the orders' retention, inside the audit's
    pruner = Pruner(pg_url, clock, attrs_batch(DEFAULT, 2), tmp_path / "archive")

    dry = run(pruner.run(dry_run=True))
    assert dry is not None
    assert dry.dry_run
    assert dry.kinds()["orders"] == 5
    assert dry.kinds()["steps"] == before["workflow_steps"]
    assert dry.kinds()["idempotency_keys"] == 5
    assert dry.kinds()["audit_entries"] == 0  # their orders are still there
    assert counts(pg_url) == before
    assert not (tmp_path / "archive").exists()

    report = run(pruner.run())
    assert report is not None
    assert report.kinds() == dry.kinds() | {"events": report.kinds()["events"]}
    assert report.batches >= 3  # 5 orders, 2 per transaction
    after = counts(pg_url)
    for table in ("orders", "workflow_steps", "finished_attempts", "api_idempotency"):
        assert after[table] == 0, table
    assert after["outbox"] == 0  # every event was published and older than the feed keeps
    assert after["audit_log"] == before["audit_log"]  # kept longest
    assert report.lines()[0] == "removed 5 orders"
    lines = [d for path in archive_files(tmp_path / "archive") for d in archived_orders(path)]
    assert sorted(d["order"]["order_id"] for d in lines) == sorted(ids)
    one = lines[0]
    assert one["order"]["items"]
    assert one["steps"]
    assert one["history"]
    assert one["audit"]
    assert all("attempts" in s for s in one["steps"])

    with live(world, run=run) as api:  # a removed order: 404 not_found, as an unknown one
        reply = api("GET", f"/api/v1/orders/{ids[0]}")
        assert (reply.status, reply.body["code"]) == (404, "not_found")

    clock.advance(400 * DAY_S)  # the audit entries of removed orders go after theirs
    late = run(pruner.run())
    assert late is not None
    assert late.audit_entries == before["audit_log"]
    assert counts(pg_url)["audit_log"] == 0


def audit_partitions(url: str) -> list[str]:
    """The audit log's partitions by name (months and DEFAULT)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'audit_log'::regclass ORDER BY 1"
        ).fetchall()
    return [r[0] for r in rows]


def audit_rows(url: str) -> dict[int, tuple[Any, ...]]:
    """Every audit entry by id: its partition, order and content."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT id, tableoid::regclass::text, order_id, at, actor, action, outcome, details"
            " FROM audit_log"
        ).fetchall()
    return {r[0]: r[1:] for r in rows}


def test_a_month_past_the_audit_retention_is_dropped_whole_keeping_the_entries_of_kept_orders(
    pg_store: PgOrderStore, pg_url: str, run: Run, tmp_path: Path
) -> None:
    world = make_world(pg_store)
    clock: FakeClock = world.clock  # 2026-01-01
    assert audit_partitions(pg_url) == ["audit_log_default"]  # a fresh database: no month yet
    finished = shipped_orders(world, run, 3)
    with live(world, run=run) as api:
        world.sim.script("shipping", "ship", ["permanent"])
        waiting = api.create(key="waits").body["order_id"]
        api.drive()
        assert api("GET", f"/api/v1/orders/{waiting}").body["needs_attention"] is True
        unfinished = api.create(key="open").body["order_id"]  # created; nothing run
    kept = {waiting, unfinished}
    written = audit_rows(pg_url)
    assert {row[0] for row in written.values()} == {"audit_log_default"}  # before any pass
    assert {str(row[1]) for row in written.values()} == set(finished) | kept

    pruner = Pruner(pg_url, clock, DEFAULT, tmp_path)
    first = run(pruner.run())
    assert first is not None
    assert first.audit_months_created == 3
    # This month and the next two; this month's entries moved out of DEFAULT into it
    assert audit_partitions(pg_url) == [
        "audit_log_202601",
        "audit_log_202602",
        "audit_log_202603",
        "audit_log_default",
    ]
    moved = audit_rows(pg_url)
    assert moved == {i: ("audit_log_202601", *row[1:]) for i, row in written.items()}

    # January 2026 is entirely past the audit's 400 days once its end is: from 2027-03-08
    clock.advance((datetime(2027, 3, 7, tzinfo=UTC) - clock.now()).total_seconds())
    assert run(pruner.run()) is not None  # the finished orders go (archived)
    assert "audit_log_202601" in audit_partitions(pg_url)  # its last day not yet past
    clock.advance(2 * DAY_S)  # 2027-03-09
    dry = run(pruner.run(dry_run=True))
    assert dry is not None
    removable = sum(1 for row in written.values() if str(row[1]) not in kept)
    assert (dry.audit_months_dropped, dry.audit_entries) == (1, removable)
    assert "audit_log_202601" in audit_partitions(pg_url)  # a dry run changes nothing

    report = run(pruner.run())
    assert report is not None
    assert (report.audit_months_dropped, report.audit_entries) == (1, removable)
    assert "dropped 1 audit_log months" in report.lines()
    partitions = audit_partitions(pg_url)
    assert "audit_log_202601" not in partitions
    assert {"audit_log_202703", "audit_log_202704", "audit_log_202705"} <= set(partitions)
    with psycopg.connect(pg_url) as conn:
        table = conn.execute("SELECT to_regclass('audit_log_202601')").fetchone()
    assert table == (None,)  # the month's table is gone, not only detached
    left = audit_rows(pg_url)
    # The kept orders' entries are back, whole and with their ids, in DEFAULT
    assert left == {
        i: ("audit_log_default", *row[1:]) for i, row in written.items() if str(row[1]) in kept
    }
    assert any(str(row[1]) == waiting for row in left.values())
    assert any(str(row[1]) == unfinished for row in left.values())
    entries = run(pg_store.audit_entries(UUID(waiting)))
    assert [e.action for e in entries] == [
        row[4] for _, row in sorted(written.items()) if str(row[1]) == waiting
    ]

    again = run(pruner.run())  # a second pass: nothing left to do
    assert again is not None
    assert again.kinds() == dict.fromkeys(again.kinds(), 0)
    assert (again.audit_months_created, again.audit_months_dropped) == (0, 0)
    assert audit_partitions(pg_url) == partitions
    assert audit_rows(pg_url) == left


def attrs_batch(policy: Policy, batch: int) -> Policy:
    return attrs.evolve(policy, batch=batch)


def test_an_order_waiting_for_a_person_or_unfinished_is_never_pruned(
    pg_store: PgOrderStore, pg_url: str, run: Run, tmp_path: Path
) -> None:
    world = make_world(pg_store)
    with live(world, run=run) as api:
        world.sim.script("shipping", "ship", ["permanent"])
        waiting = api.create(key="waits").body["order_id"]
        api.drive()
        assert api("GET", f"/api/v1/orders/{waiting}").body["needs_attention"] is True
        finished = api.create(key="done").body["order_id"]
        api.drive()
        unfinished = api.create(key="open").body["order_id"]  # created; nothing run
    world.clock.advance(10 * 365 * DAY_S)
    report = run(Pruner(pg_url, world.clock, DEFAULT, tmp_path).run(older_than_s=0))
    assert report is not None
    assert report.orders == 1
    with psycopg.connect(pg_url) as conn:
        kept = {str(r[0]) for r in conn.execute("SELECT order_id FROM orders")}
        assert kept == {waiting, unfinished}
        # Their history stays whole: the feed's prune leaves a kept order's transitions.
        for order_id in kept:
            history = conn.execute(
                "SELECT count(*) FROM order_history WHERE order_id = %s", (order_id,)
            ).fetchone()
            assert history is not None
            assert history[0] >= 1
        audit = conn.execute("SELECT count(*) FROM audit_log WHERE order_id = %s", (waiting,))
        assert audit.fetchone()[0] > 0  # type: ignore[index]
    assert find_archived(tmp_path, UUID(finished)) is not None


def test_an_expired_idempotency_key_is_new_again_and_creates_another_order(
    pg_store: PgOrderStore, pg_url: str, run: Run, tmp_path: Path
) -> None:
    world = make_world(pg_store)
    with live(world, run=run) as api:
        first = api.create(key="same").body["order_id"]
        replay = api("POST", "/api/v1/orders", key="same", body=ORDER_BODY)
        assert replay.body["order_id"] == first  # within its TTL: the same order
        world.clock.advance(DAY_S + 1)
        report = run(Pruner(pg_url, world.clock, DEFAULT, tmp_path).run())
        assert report is not None
        assert report.idempotency_keys == 1
        assert report.orders == 0
        again = api("POST", "/api/v1/orders", key="same", body=ORDER_BODY)
        assert again.status == 202
        assert again.body["order_id"] != first  # after it: a new order
        assert api("GET", f"/api/v1/orders/{first}").status == 200  # the first one stays


def test_a_feed_cursor_older_than_what_is_kept_is_answered_410_cursor_expired(
    pg_store: PgOrderStore, pg_url: str, run: Run, tmp_path: Path
) -> None:
    world = make_world(pg_store)
    shipped_orders(world, run, 2, key="old")
    with live(world, run=run) as api:
        page = api("GET", "/api/v1/events?after=0&limit=1000", who="operator").body
        first_seq = page["events"][0]["seq"]
        world.clock.advance(8 * DAY_S)  # past the feed's week, inside the orders' quarter
        newer = api.create(key="new").body["order_id"]
        api.drive()
        report = run(Pruner(pg_url, world.clock, DEFAULT, tmp_path).run())
        assert report is not None
        assert report.orders == 0
        stale = api("GET", f"/api/v1/events?after={first_seq}", who="operator")
        assert (stale.status, stale.body["code"]) == (410, "cursor_expired")
        floor = stale.body["oldest_after"]
        assert floor >= first_seq
        resumed = api("GET", f"/api/v1/events?after={floor}", who="operator")
        assert resumed.status == 200
        assert {e["order_id"] for e in resumed.body["events"]} == {newer}
        fresh = api("GET", "/api/v1/events?after=0", who="operator")  # from the oldest kept
        assert fresh.status == 200
        assert fresh.body["events"][0]["seq"] > floor
    with pytest.raises(FeedCursorExpired):
        run(pg_store.events(after=first_seq, limit=10))


def test_one_pruner_at_a_time_a_second_pass_is_skipped_while_the_lock_is_held(
    pg_store: PgOrderStore, pg_url: str, run: Run, tmp_path: Path
) -> None:
    world = make_world(pg_store)
    shipped_orders(world, run, 2)
    world.clock.advance(91 * DAY_S)
    pruner = Pruner(pg_url, world.clock, DEFAULT, tmp_path)
    with psycopg.connect(pg_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (PRUNE_LOCK_KEY,))
        assert run(pruner.run()) is None
        assert counts(pg_url)["orders"] == 2
        holder.execute("SELECT pg_advisory_unlock(%s)", (PRUNE_LOCK_KEY,))
    report = run(pruner.run())
    assert report is not None
    assert report.orders == 2


def test_a_worker_prunes_on_its_schedule_only_while_no_other_pruner_runs(
    pg_store: PgOrderStore, pg_url: str, run: Run, tmp_path: Path, procs: list[Proc]
) -> None:
    world = make_world(pg_store)
    shipped_orders(world, run, 3)  # on the FakeClock: years before the worker's real clock
    env = base_env(
        ORDERFLOW_DATABASE_URL=pg_url,
        ORDERFLOW_PRUNE_INTERVAL_S="0.2",
        ORDERFLOW_ARCHIVE_DIR=str(tmp_path / "archive"),
        ORDERFLOW_WAREHOUSE_URL="http://127.0.0.1:9",
        ORDERFLOW_PAYMENTS_URL="http://127.0.0.1:9",
        ORDERFLOW_SHIPPING_URL="http://127.0.0.1:9",
    )
    with psycopg.connect(pg_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (PRUNE_LOCK_KEY,))
        worker = Proc("worker", env)
        procs.append(worker)
        worker.wait_for(r"prune pass skipped: another pruner", timeout_s=120)
        assert counts(pg_url)["orders"] == 3
        holder.execute("SELECT pg_advisory_unlock(%s)", (PRUNE_LOCK_KEY,))
    eventually(lambda: counts(pg_url)["orders"] == 0, what="the scheduled prune")
    worker.wait_for(r"pruned: removed 3 orders")
    assert worker.terminate() == 0


def test_a_crash_between_archive_and_delete_leaves_the_order_archived_and_present(
    pg_store: PgOrderStore, pg_url: str, run: Run, tmp_path: Path, procs: list[Proc]
) -> None:
    world = make_world(pg_store)
    ids = shipped_orders(world, run, 3)
    archive = tmp_path / "archive"
    env = base_env(ORDERFLOW_DATABASE_URL=pg_url, ORDERFLOW_PRUNE_BATCH="2")
    env_stop = dict(env, **{STOP_AFTER_ARCHIVE: "1"})
    proc = PruneProc(["--older-than", "0s", "--archive-dir", str(archive)], env_stop)
    procs.append(proc)
    proc.wait_for(r"checkpoint: archived 2 orders, not deleted")
    os.kill(proc.popen.pid, signal.SIGKILL)
    proc.popen.wait(timeout=10)
    archived = [d for p in archive_files(archive) for d in archived_orders(p)]
    assert len(archived) == 2
    assert counts(pg_url)["orders"] == 3  # archived, never deleted: all still there

    done = run_cli(["prune", "--older-than", "0s", "--archive-dir", str(archive)], env)
    assert done.returncode == 0, output_lines(done)
    assert "removed 3 orders" in done.stdout
    assert counts(pg_url)["orders"] == 0
    again = [d["order"]["order_id"] for p in archive_files(archive) for d in archived_orders(p)]
    assert sorted(set(again)) == sorted(ids)
    assert len(again) == 5  # the crashed batch's two orders are in the archive twice
    twice = archived[0]["order"]["order_id"]
    found = run_cli(["archive", "find", twice, "--archive-dir", str(archive)], env)
    assert found.returncode == 0
    assert json.loads(found.stdout)["order"]["order_id"] == twice


class PruneProc(Proc):
    """`orderflow prune ARGS` as a process whose lines are read as they come."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "orderflow.cli", "prune", *args],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()


def test_a_truncated_last_batch_is_read_up_to_its_last_whole_line(tmp_path: Path) -> None:
    path = tmp_path / "orders-20260101T000000000000Z-1.jsonl.gz"
    whole = gzip.compress(b'{"order": {"order_id": "a"}}\n')
    batch = "".join(
        f'{{"order": {{"order_id": "b{i}", "pad": "{os.urandom(40).hex()}"}}}}\n'
        for i in range(200)
    )
    member = gzip.compress(batch.encode())
    path.write_bytes(whole + member[: len(member) // 2])  # a crash in the middle of a write
    read = [d["order"]["order_id"] for d in archived_orders(path)]
    assert read[0] == "a"
    assert 1 < len(read) < 201
    assert read[1:] == [f"b{i}" for i in range(len(read) - 1)]  # whole lines, in order


@pytest.mark.parametrize("value", ["30", "ten days", "-1d", "5w", ""])
def test_a_bad_duration_is_one_line_and_exit_2(value: str, pg_url: str) -> None:
    done = run_cli(["prune", f"--older-than={value}"], base_env(ORDERFLOW_DATABASE_URL=pg_url))
    assert done.returncode == 2
    lines = output_lines(done)
    assert len(lines) == 1, lines
    assert "--older-than" in lines[0]
    assert "e.g. 30d" in lines[0]


def test_retention_settings_are_checked_against_each_other() -> None:
    settings = load_settings({"ORDERFLOW_RETENTION_ORDERS": "30d"})
    assert settings.retention.orders_s == 30 * DAY_S
    with pytest.raises(ConfigError, match="ORDERFLOW_RETENTION_FEED"):
        load_settings({"ORDERFLOW_RETENTION_ORDERS": "3d"})  # the feed's default week is longer
    with pytest.raises(ConfigError, match="ORDERFLOW_RETENTION_AUDIT"):
        load_settings({"ORDERFLOW_RETENTION_AUDIT": "10d"})
    with pytest.raises(ConfigError, match=r"e\.g\. 30d"):
        load_settings({"ORDERFLOW_RETENTION_ORDERS": "a year"})
    assert timedelta(seconds=load_settings({}).retention.idempotency_s) == timedelta(days=1)
