"""The pruner: removes what the retention policy allows, archiving each order first.

One pass (`Pruner.run`) works kind by kind, each in bounded batches of their own transactions:

1. finished orders older than the orders' retention: each batch is locked, written to the
   archive (one JSON line per order, one gzip member per batch, fsynced), then deleted with its
   steps, attempts, refunds, processed event ids and events, and committed. A crash after the
   fsync and before the commit leaves the batch archived and still present: the next pass
   archives it again (readers of the archive keep one line per order id, docs/retention.md);
   nothing is ever removed without being archived first;
2. the feed: its floor (`outbox_feed.pruned_through`) rises through the newest published event
   older than the feed's retention, and the events at or below it that no kept order needs are
   removed (a kept order's transitions are its history and stay with it; a removed order's
   events above the old floor go now);
3. idempotency keys older than their TTL;
4. the audit log, partitioned by month on `at`: the partitions of the current and the coming
   months are created, and a month entirely older than the audit retention is dropped whole,
   its entries whose order still exists put back first (into the DEFAULT partition, kept with
   their order); in the DEFAULT partition, entries older than the retention whose order is gone
   are deleted in batches.

The SQL is `prune.sql`; time comes from the injected clock.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import importlib.resources
import os
import signal
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import attrs
import orjson
import psycopg
import psycopg.errors
import psycopg.rows
from psycopg import sql

from orderflow_core.errors import FeedCursorExpired
from orderflow_core.ports import Clock
from orderflow_pg.queries import parse_queries, query
from orderflow_pg.rows import Row

# "prune" in ASCII beside the migration lock's "orderflow": one pruner at a time.
PRUNE_LOCK_KEY = 0x6F66_7072_756E_65
# A test hook, off unless set: after this many archive batches were made durable, the process
# announces it and stops itself (SIGSTOP) before deleting them, so a crash test can SIGKILL it
# exactly between the archive and the delete.
STOP_AFTER_ARCHIVE = "_ORDERFLOW_TEST_STOP_AFTER_ARCHIVE"
# The pruner's own statement deadline (its batches are bounded; this only stops a runaway).
PRUNE_STATEMENT_TIMEOUT_S = 60
FEED_WALK = 10  # feed events read per batch: this many times the batch size
# The audit log's partitions: the current month's and this many after it exist after a pass
# (created ahead, so the hot path's entries land in their month, not in the DEFAULT partition).
AUDIT_MONTHS_AHEAD = 2
# A partition change may read a whole month (the count of a month to drop) ...
PARTITION_STATEMENT_TIMEOUT_S = 900
# ... but waits this long at most for its lock on `audit_log` (writers queue behind a waiting
# DDL lock: a pass that cannot have it at once leaves the month to the next pass).
PARTITION_LOCK_TIMEOUT_S = 0.5
# The finished orders' lock: in the batch's own statement on one server; on Citus none there
# (row locks in single-shard statements only), each order locked by itself instead.
LOCKED = sql.SQL("FOR UPDATE OF o SKIP LOCKED")
UNLOCKED = sql.SQL("")
EPOCH = datetime.fromisoformat("1970-01-01T00:00:00+00:00")
NO_ORDER = UUID(int=0)


@functools.cache
def _queries() -> dict[str, str]:
    """The pruner's named statements (`prune.sql`), read once per process."""
    text = importlib.resources.files("orderflow_pg").joinpath("prune.sql").read_text("utf-8")
    return parse_queries(text)


@attrs.frozen
class Policy:
    """How long each kind is kept, in seconds, and the batch size (`RetentionSettings`)."""

    orders_s: float
    feed_s: float
    idempotency_s: float
    audit_s: float
    batch: int = 500

    def capped(self, older_than_s: float | None) -> Policy:
        """`--older-than`: every kind kept at most that long for this pass."""
        if older_than_s is None:
            return self
        return attrs.evolve(
            self,
            orders_s=min(self.orders_s, older_than_s),
            feed_s=min(self.feed_s, older_than_s),
            idempotency_s=min(self.idempotency_s, older_than_s),
            audit_s=min(self.audit_s, older_than_s),
        )


@attrs.define
class PruneReport:
    """What one pass removed (or, in a dry run, would remove), per kind."""

    dry_run: bool = False
    orders: int = 0
    steps: int = 0
    attempts: int = 0
    refunds: int = 0
    processed_events: int = 0
    order_events: int = 0
    feed_events: int = 0
    idempotency_keys: int = 0
    audit_entries: int = 0
    audit_months_created: int = 0
    audit_months_dropped: int = 0
    audit_months_busy: int = 0
    batches: int = 0
    archive: Path | None = None

    def kinds(self) -> dict[str, int]:
        """The counts by kind, in the order they are printed."""
        return {
            "orders": self.orders,
            "steps": self.steps,
            "attempts": self.attempts,
            "refunds": self.refunds,
            "processed_events": self.processed_events,
            "events": self.order_events + self.feed_events,
            "idempotency_keys": self.idempotency_keys,
            "audit_entries": self.audit_entries,
        }

    def lines(self) -> list[str]:
        """One line per kind, then where the archive went."""
        verb = "would remove" if self.dry_run else "removed"
        out = [f"{verb} {n} {kind}" for kind, n in self.kinds().items()]
        if self.audit_months_dropped:
            out.append(
                f"{'would drop' if self.dry_run else 'dropped'} {self.audit_months_dropped}"
                " audit_log months"
            )
        if self.audit_months_created:
            out.append(f"created {self.audit_months_created} audit_log months")
        if self.audit_months_busy:
            out.append(f"left {self.audit_months_busy} audit_log months to the next pass (busy)")
        if self.archive is not None:
            out.append(f"archived {self.orders} orders to {self.archive}")
        elif not self.dry_run:
            out.append("archived nothing (no order was removed)")
        return out


class Archive:
    """One pass's archive file: a gzip member per batch, appended and fsynced before the batch's
    delete commits. Opened on the first batch; named by the pass's start and process id."""

    def __init__(self, directory: Path, started: datetime) -> None:
        self.directory = directory
        self.path = directory / f"orders-{started:%Y%m%dT%H%M%S%fZ}-{os.getpid()}.jsonl.gz"
        self._created = False

    def write(self, lines: list[str]) -> None:
        """Append the lines as one gzip member and make it durable (file, and the directory's
        entry the first time)."""
        data = gzip.compress("".join(line + "\n" for line in lines).encode("utf-8"))
        if not self._created:
            self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if not self._created:
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            self._created = True


def _checkpoint() -> Callable[[int], None]:
    raw = os.environ.get(STOP_AFTER_ARCHIVE)
    if not raw:
        return lambda _n: None
    remaining = [int(raw)]

    def stop(orders: int) -> None:
        remaining[0] -= 1
        if remaining[0] == 0:
            print(f"checkpoint: archived {orders} orders, not deleted", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)

    return stop


class Pruner:
    """Runs prune passes against one database, with its own connection per pass."""

    def __init__(self, url: str, clock: Clock, policy: Policy, archive_dir: Path) -> None:
        self._url = url
        self._clock = clock
        self._policy = policy
        self._archive_dir = archive_dir
        self._checkpoint = _checkpoint()

    async def run(
        self, *, dry_run: bool = False, older_than_s: float | None = None
    ) -> PruneReport | None:
        """One pass; None (and nothing done) when another pruner holds the lock."""
        options = f"-c statement_timeout={PRUNE_STATEMENT_TIMEOUT_S * 1000} -c TimeZone=UTC"
        connect = psycopg.AsyncConnection.connect(
            self._url, autocommit=True, connect_timeout=10, options=options
        )
        async with await connect as conn:
            lock = {"lock_key": PRUNE_LOCK_KEY}
            if not (await _one(conn, "prune_lock", lock))["locked"]:
                return None
            try:
                return await _Pass(
                    conn,
                    self._clock.now(),
                    self._policy.capped(older_than_s),
                    Archive(self._archive_dir, self._clock.now()),
                    dry_run,
                    self._checkpoint,
                    await _distributed(conn),
                ).run()
            finally:
                await _one(conn, "prune_unlock", lock)


Conn = psycopg.AsyncConnection[Any]


async def _distributed(conn: Conn) -> bool:
    """Whether the orders are distributed by Citus here (the store's own check)."""
    async with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        await cur.execute(query("citus_installed"))
        found = await cur.fetchone()
        if not (found and found["installed"]):
            return False
        await cur.execute(query("citus_tables"))
        return "orders" in {r["name"] for r in await cur.fetchall()}


Parts = dict[str, sql.Composable]


def _statement(name: str, parts: Parts | None) -> sql.SQL | sql.Composed:
    """A named statement; with `parts`, its `{name}` places filled with identifiers and
    literals (DDL takes no bound parameters)."""
    statement = sql.SQL(_queries()[name])
    return statement.format(**parts) if parts else statement


async def _all(
    conn: Conn, name: str, params: dict[str, Any], parts: Parts | None = None
) -> list[Row]:
    async with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        await cur.execute(_statement(name, parts), params)
        return await cur.fetchall()


async def _one(conn: Conn, name: str, params: dict[str, Any], parts: Parts | None = None) -> Row:
    [row] = await _all(conn, name, params, parts)
    return row


async def _run(conn: Conn, name: str, params: dict[str, Any], parts: Parts | None = None) -> int:
    async with conn.cursor() as cur:
        await cur.execute(_statement(name, parts), params)
        return cur.rowcount


def month_start(at: datetime) -> datetime:
    """The first instant of `at`'s month, UTC."""
    at = at.astimezone(UTC)
    return datetime(at.year, at.month, 1, tzinfo=UTC)


def add_months(month: datetime, n: int) -> datetime:
    """The first instant of the month `n` months after `month` (a month's start)."""
    index = month.year * 12 + month.month - 1 + n
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


def month_partition(month: datetime) -> str:
    """The name of a month's audit partition: audit_log_YYYYMM."""
    return f"audit_log_{month:%Y%m}"


def partition_month(name: str) -> datetime:
    """The month an audit partition's name stands for."""
    digits = name.removeprefix("audit_log_")
    return datetime(int(digits[:4]), int(digits[4:]), 1, tzinfo=UTC)


@attrs.define
class _Pass:
    conn: Conn
    now: datetime
    policy: Policy
    archive: Archive
    dry_run: bool
    checkpoint: Callable[[int], None]
    distributed: bool = False
    report: PruneReport = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.report = PruneReport(dry_run=self.dry_run)

    def cutoff(self, kept_s: float) -> datetime:
        return self.now - timedelta(seconds=kept_s)

    async def run(self) -> PruneReport:
        # Orders first: a feed backlog (a first pass over months of events) must not hold back
        # the removal of orders; their events above the floor go in the feed's turn.
        await self.orders()
        await self.feed()
        await self.idempotency()
        await self.audit()
        return self.report

    async def feed(self) -> None:
        cutoff = self.cutoff(self.policy.feed_s)
        position = await _one(self.conn, "feed_position", {})
        floor, published = position["pruned_through"], position["published_through"]
        walk = self.policy.batch * FEED_WALK
        while True:
            rows = await _all(
                self.conn,
                "feed_next",
                {
                    "floor": floor,
                    "published": published,
                    "limit": walk,
                },
            )
            old = 0
            for row in rows:
                if row["created_at"] >= cutoff:
                    break
                old += 1
            if old == 0:
                return
            through = rows[old - 1]["seq"]
            params = {"floor": floor, "through": through}
            if self.dry_run:
                self.report.feed_events += (await _one(self.conn, "feed_count", params))["n"]
            else:
                self.report.feed_events += await _run(self.conn, "feed_prune", params)
            self.report.batches += 1
            floor = through
            if old < len(rows) or len(rows) < walk:
                return

    async def orders(self) -> None:
        cutoff = self.cutoff(self.policy.orders_s)
        after_at, after_id = EPOCH, NO_ORDER
        while True:
            async with self.conn.transaction(force_rollback=self.dry_run):
                found = await self._finished(after_at, after_id, cutoff)
                if not found:
                    return
                after_at, after_id = found[-1]["created_at"], found[-1]["order_id"]
                ids = await self._locked([r["order_id"] for r in found], cutoff)
                if ids:
                    await self._remove(ids)
            self.report.batches += 1
            if len(found) < self.policy.batch:
                return

    async def _finished(self, after_at: datetime, after_id: UUID, cutoff: datetime) -> list[Row]:
        """The next batch of finished orders past the keyset position: locked on one server,
        only candidates on Citus (`_locked` locks them there)."""
        params = {"after_at": after_at, "after_id": after_id, "cutoff": cutoff,
                  "limit": self.policy.batch, "only": None}
        lock = UNLOCKED if self.distributed else LOCKED
        return await _all(self.conn, "finished_orders", params, {"lock": lock})

    async def _locked(self, candidates: list[UUID], cutoff: datetime) -> list[UUID]:
        """The candidates this pass holds: all of them on one server (locked as found); on
        Citus each one locked on its own shard, then confirmed still finished under the lock
        (a writer may have changed it between the read and the lock)."""
        if not self.distributed:
            return candidates
        held = [c for c in candidates if await _all(self.conn, "lock_order", {"order_id": c})]
        if not held:
            return []
        params = {"after_at": EPOCH, "after_id": NO_ORDER, "cutoff": cutoff,
                  "limit": len(held), "only": held}
        confirmed = await _all(self.conn, "finished_orders", params, {"lock": UNLOCKED})
        return [r["order_id"] for r in confirmed]

    async def _remove(self, ids: list[UUID]) -> None:
        """Archive the held orders (made durable first), then delete them with their rows."""
        if not self.dry_run:
            docs = await _all(self.conn, "archive_documents", {"order_ids": ids, "now": self.now})
            await asyncio.to_thread(self.archive.write, [d["doc"] for d in docs])
            self.report.archive = self.archive.path
            self.checkpoint(len(ids))
        counts = await _one(self.conn, "delete_orders", {"order_ids": ids})
        self.report.orders += await _run(self.conn, "delete_order_rows", {"order_ids": ids})
        self.report.steps += counts["steps"]
        self.report.attempts += counts["attempts"]
        self.report.refunds += counts["refunds"]
        self.report.processed_events += counts["processed_events"]
        self.report.order_events += counts["events"]

    async def idempotency(self) -> None:
        cutoff = self.cutoff(self.policy.idempotency_s)
        if self.dry_run:
            found = await _one(self.conn, "idempotency_count", {"cutoff": cutoff})
            self.report.idempotency_keys = found["n"]
            return
        self.report.idempotency_keys = await self._batches("idempotency_prune", cutoff)

    async def audit(self) -> None:
        cutoff = self.cutoff(self.policy.audit_s)
        months = {partition_month(r["name"]) for r in await _all(self.conn, "audit_months", {})}
        if not self.dry_run:
            await self.audit_months_ahead(months)
        for month in sorted(months):
            if add_months(month, 1) <= cutoff:
                await self.audit_month_drop(month)
        if self.dry_run:
            found = await _one(self.conn, "audit_count", {"cutoff": cutoff})
            self.report.audit_entries += found["n"]
            return
        self.report.audit_entries += await self._batches("audit_prune", cutoff)

    async def _partition_change(self) -> None:
        timeouts = {
            "statement_ms": str(PARTITION_STATEMENT_TIMEOUT_S * 1000),
            "lock_ms": str(int(PARTITION_LOCK_TIMEOUT_S * 1000)),
        }
        await _one(self.conn, "partition_timeouts", timeouts)

    async def audit_months_ahead(self, months: set[datetime]) -> None:
        """The current month's partition and the next AUDIT_MONTHS_AHEAD', those missing; a
        month's entries already in the DEFAULT partition are moved into its own."""
        first = month_start(self.now)
        for month in (add_months(first, n) for n in range(AUDIT_MONTHS_AHEAD + 1)):
            if month in months:
                continue
            bounds = {"lo": month, "hi": add_months(month, 1)}
            parts: Parts = {
                "month": sql.Identifier(month_partition(month)),
                "lo": sql.Literal(bounds["lo"]),
                "hi": sql.Literal(bounds["hi"]),
            }
            try:
                async with self.conn.transaction():
                    await self._partition_change()
                    moved = bool(await _all(self.conn, "audit_default_has", bounds))
                    if moved:
                        await _run(self.conn, "audit_stash", {})
                        await _run(self.conn, "audit_stash_default", bounds)
                    await _run(self.conn, "audit_month_create", {}, parts)
                    if moved:
                        await _run(self.conn, "audit_unstash", {})
            except psycopg.errors.LockNotAvailable:
                self.report.audit_months_busy += 1
                continue
            self.report.audit_months_created += 1

    async def audit_month_drop(self, month: datetime) -> None:
        """Drop a month past the audit retention: its entries whose order still exists are
        stashed, the month detached, the stash put back through the parent (into the DEFAULT
        partition), and the month dropped, in one transaction: a reader sees the month whole or
        only its kept entries."""
        parts: Parts = {"month": sql.Identifier(month_partition(month))}
        params = {"hi": add_months(month, 1)}
        try:
            async with self.conn.transaction(force_rollback=self.dry_run):
                await self._partition_change()
                total = (await _one(self.conn, "audit_month_size", {}, parts))["n"]
                if self.dry_run:
                    kept = (await _one(self.conn, "audit_month_kept", params, parts))["n"]
                else:
                    await _run(self.conn, "audit_stash", {})
                    kept = await _run(self.conn, "audit_stash_kept", params, parts)
                    await _run(self.conn, "audit_month_detach", {}, parts)
                    await _run(self.conn, "audit_unstash", {})
                    await _run(self.conn, "audit_month_drop", {}, parts)
        except psycopg.errors.LockNotAvailable:
            self.report.audit_months_busy += 1
            return
        self.report.audit_entries += total - kept
        self.report.audit_months_dropped += 1

    async def _batches(self, name: str, cutoff: datetime) -> int:
        limit = self.policy.batch * FEED_WALK
        total = 0
        while True:
            removed = await _run(self.conn, name, {"cutoff": cutoff, "limit": limit})
            total += removed
            self.report.batches += 1
            if removed < limit:
                return total


async def feed_floor(conn: Conn) -> int:
    """The feed's floor: events at or below it may have been removed."""
    return int((await _one(conn, "feed_floor", {}))["pruned_through"])


def check_feed_cursor(after: int, floor: int) -> None:
    """Refuse a cursor below the floor (read after the page, so a floor raised meanwhile is
    seen); `after=0` means "from the oldest event kept", not a position."""
    if 0 < after < floor:
        raise FeedCursorExpired(
            f"the events after {after} are no longer kept (the feed keeps those after {floor},"
            " ORDERFLOW_RETENTION_FEED); read the feed again from after={floor} or from the start"
            " (after=0)",
            oldest_after=floor,
        )


def archive_files(directory: Path) -> list[Path]:
    """The archive's files, oldest pass first (their names start with the pass's start)."""
    return sorted(directory.glob("orders-*.jsonl.gz"))


def archived_orders(path: Path) -> Iterator[dict[str, Any]]:
    """Each complete line of one archive file as a document. A file whose last batch was cut
    short by a crash (before that batch's delete could commit) ends at its last whole line."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                try:
                    yield orjson.loads(line)
                except orjson.JSONDecodeError:
                    return
    except (EOFError, gzip.BadGzipFile, zlib.error):
        return


def find_archived(directory: Path, order_id: UUID) -> dict[str, Any] | None:
    """The newest archived copy of one order (an order archived twice, by a pass that crashed
    before its delete committed and by a later one, has two identical-but-for-`archived_at`
    lines), or None."""
    wanted = str(order_id)
    found = None
    for path in archive_files(directory):
        for doc in archived_orders(path):
            if doc.get("order", {}).get("order_id") == wanted:
                found = doc
    return found
