"""`PgOrderStore`: the `OrderStore` port on PostgreSQL, one transaction per unit of work."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID

import attrs

from orderflow_core import deadlines, ids
from orderflow_core.errors import (
    ConcurrentUpdate,
    DuplicateIdempotencyKey,
    NotFound,
    StoreUnavailable,
)
from orderflow_core.model import (
    ApiIdempotency,
    AuditEntry,
    Change,
    Claim,
    HistoryEntry,
    Order,
    OrderAggregate,
    OutboxEvent,
)
from orderflow_core.ports import OrderCount, claim_then_start
from orderflow_core.states import OrderState
from orderflow_pg import rows
from orderflow_pg.database import Database
from orderflow_pg.feed import FeedHorizon
from orderflow_pg.migrate import pending_migrations
from orderflow_pg.prune import check_feed_cursor, feed_floor
from orderflow_pg.queries import Connection, execute, fetch_all, fetch_one
from orderflow_pg.reads import (
    claimed_aggregates,
    lock_aggregates,
    lock_each,
    read_aggregate,
    read_view,
)
from orderflow_pg.users import PgUsers
from orderflow_pg.writes import (
    apply_documents,
    change_doc,
    expecting,
    insert_new_order,
    rejection_doc,
)

T = TypeVar("T")

log = logging.getLogger("orderflow.store")

# How many orders' last-written aggregates a store keeps to decide their next change on. Only
# orders with a step still to run (due or running) are kept: a finished order's next change, if
# any (an operator's refund), reads it afresh, and a store kept no copy it would not use again.
KEPT_ORDERS = 10_000
# A kept copy of an order: its version and its aggregate.
Kept = tuple[int, OrderAggregate]
# The most creates one statement carries (what queued beyond waits for the next).
MAX_CREATES_PER_COMMIT = 64


class PgOrderStore:
    """Durable orders on PostgreSQL: what makes the saga survive crashes and scale out."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self.users = PgUsers(database)
        self._creates: list[tuple[Change, asyncio.Future[None]]] = []
        self._create_writer: asyncio.Task[None] | None = None
        # Per order this store wrote or claimed a step of last: (version, aggregate) as written
        # or as the claim read it with the claim put in, oldest first.
        self._kept: OrderedDict[UUID, Kept] = OrderedDict()
        self._horizon = FeedHorizon()  # how far the relay may publish the outbox
        # On a Citus coordinator whose tables are distributed (`open` finds out): every
        # transaction touches one order, so one shard (docs/citus.md).
        self.distributed = False

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        statement_timeout_s: float = 3.0,
        connect_timeout_s: float = 10.0,
        transaction_pooler: bool = False,
    ) -> AsyncIterator[PgOrderStore]:
        """A store on a fresh pool; size it for the executor's concurrency plus the API.

        Opening waits up to `connect_timeout_s` for `min_size` connections, then raises
        `StoreUnavailable`.
        """
        async with Database.open(
            url,
            min_size=min_size,
            max_size=max_size,
            statement_timeout_s=statement_timeout_s,
            connect_timeout_s=connect_timeout_s,
            transaction_pooler=transaction_pooler,
        ) as database:
            store = cls(database)
            store.distributed = await store._distributed()
            yield store

    async def _distributed(self) -> bool:
        async with self._db.connection("citus_installed") as conn:
            found = await fetch_one(conn, "citus_installed")
            if not (found and found["installed"]):
                return False
            tables = await fetch_all(conn, "citus_tables")
        return "orders" in {r["name"] for r in tables}

    async def create(self, change: Change) -> None:
        """Insert a new order and its first steps; `DuplicateIdempotencyKey` if the key exists.

        Concurrent creates share a commit: one writer sends every create queued while its
        previous statement ran as one `apply_changes` statement in autocommit (when idle, a
        create goes out at once). Each caller returns only after the statement that carried
        its order committed. If that statement fails for anything but an unreachable database
        (a reused idempotency key in the batch), each create is retried alone, so only the
        failing one fails."""
        if change.order is None:
            raise ValueError("create needs an order")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._creates.append((change, future))
        if self._create_writer is None or self._create_writer.done():
            with deadlines.detached():  # it writes for every caller, not for this one alone
                self._create_writer = asyncio.create_task(self._write_creates())
        await future

    async def _write_creates(self) -> None:
        try:
            while self._creates:
                batch = self._creates[:MAX_CREATES_PER_COMMIT]
                del self._creates[:MAX_CREATES_PER_COMMIT]
                await self._commit_creates(batch)
        finally:  # cancelled: nobody commits for the callers still queued
            for _, future in self._creates:
                future.cancel()
            self._creates.clear()

    async def _commit_creates(self, batch: list[tuple[Change, asyncio.Future[None]]]) -> None:
        if self.distributed and len(batch) > 1:  # one order, one shard: each on its own
            await asyncio.gather(*(self._commit_creates([entry]) for entry in batch))
            return
        try:
            async with self._db.connection("create") as conn:
                docs = [change_doc(c, new=True) for c, _ in batch]
                await _apply(conn, docs, one_order=self.distributed)
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except StoreUnavailable as exc:
            for _, future in batch:
                _settle(future, StoreUnavailable(str(exc)))
            return
        except Exception as exc:
            if len(batch) == 1:
                _settle(batch[0][1], exc)
                return
            for change, future in batch:  # each alone: only the failing create fails
                try:
                    async with self._db.connection("create") as conn:
                        await insert_new_order(conn, change, one_order=self.distributed)
                except asyncio.CancelledError:
                    raise
                except Exception as alone:
                    _settle(future, alone)
                else:
                    _settle(future, None)
            return
        for _, future in batch:
            _settle(future, None)

    async def update(
        self, order_id: UUID, decide: Callable[[OrderAggregate], tuple[Change, T]]
    ) -> T:
        """Lock the order, decide, apply the change (or only its rejection), return the value.

        Four statements: BEGIN, the locking read, the change, COMMIT. (Pipelining them costs
        the client more CPU than the round trips it saves on a local server.) A change fenced
        off at the write wrote nothing; only its rejection is recorded. A copy of the order
        this store kept is dropped (none is kept from here: API commands rarely repeat)."""
        self._kept.pop(order_id, None)
        async with self._db.connection("update") as conn, conn.transaction():
            aggregate = await read_aggregate(conn, order_id, lock=True)
            if aggregate is None:
                raise NotFound(f"order {order_id} not found")
            change, value = decide(aggregate)
            written = await self._commit_alone(conn, aggregate, change)
        # Decide accepted the guard but the write found it fenced off (its rejection is
        # committed): do not hand back a value that belongs to no commit.
        if written is Written.REJECTED:
            raise ConcurrentUpdate(f"order {order_id} changed under a guarded update")
        return value

    async def update_many(
        self, updates: Sequence[tuple[UUID, Callable[[OrderAggregate], tuple[Change, T]]]]
    ) -> list[T | Exception]:
        """A group commit: one `apply_changes` statement carrying every order's document, each
        fenced by its own guard. An order this store wrote or claimed in last (its kept copy)
        is decided on that copy and written only if the order is still as the copy says
        (checked under row locks inside the statement); the others are read first with one
        locking read. With only kept copies the batch is that one statement alone (autocommit,
        one round trip); otherwise BEGIN, the locking read, the statement, COMMIT. An order
        whose copy turned out stale is then read and decided again, once. Pairs of an order
        already in the batch go in a later round of the same transaction. If the shared
        transaction fails for anything but an unreachable database, each order is retried
        alone, once, so one order's bad write does not fail the others."""
        if not updates:
            return []
        if self.distributed:  # each order its own one-shard transaction (docs/citus.md)
            return await self._each_alone(updates)
        try:
            results: dict[int, T | Exception] = {}
            stale = await self._group_commit(updates, range(len(updates)), results, kept=True)
            if stale:
                await self._group_commit(updates, stale, results, kept=False)
            return [results[i] for i in range(len(updates))]
        except StoreUnavailable:
            for order_id, _ in updates:
                self._kept.pop(order_id, None)
            raise
        except Exception as exc:
            for order_id, _ in updates:
                self._kept.pop(order_id, None)
            if len(updates) == 1:
                return [exc]
            log.warning(
                "a group commit of %d orders failed (%s: %s); each order is retried alone",
                len(updates),
                type(exc).__name__,
                exc,
            )
        return await self._each_alone(updates)

    async def _each_alone(
        self, updates: Sequence[tuple[UUID, Callable[[OrderAggregate], tuple[Change, T]]]]
    ) -> list[T | Exception]:
        alone: list[T | Exception] = []
        for order_id, decide in updates:
            try:
                alone.append(await self.update(order_id, decide))
            except StoreUnavailable:
                raise
            except Exception as exc:  # this order's own failure
                alone.append(exc)
        return alone

    async def _group_commit(
        self,
        updates: Sequence[tuple[UUID, Callable[[OrderAggregate], tuple[Change, T]]]],
        indices: Iterable[int],
        results: dict[int, T | Exception],
        *,
        kept: bool,
    ) -> list[int]:
        """Commit `indices` of `updates` into `results`; the indices whose kept copy was stale."""
        rounds = _rounds(updates, indices)
        copies = _copies(updates, rounds, self._kept if kept else {})
        reads = len(rounds) > 1 or len(copies) < len(rounds[0])
        async with self._db.connection("update_many") as conn:
            transaction = conn.transaction() if reads else contextlib.nullcontext()
            async with transaction:
                written, stale = await self._write_rounds(conn, updates, rounds, copies, results)
        for order_id, version, aggregate in written:  # committed: keep what was written
            self._keep(order_id, version, aggregate)
        return stale

    async def _write_rounds(
        self,
        conn: Connection,
        updates: Sequence[tuple[UUID, Callable[[OrderAggregate], tuple[Change, T]]]],
        rounds: list[list[int]],
        copies: dict[int, Kept],
        results: dict[int, T | Exception],
    ) -> tuple[list[tuple[UUID, int, OrderAggregate]], list[int]]:
        """Each round's decisions and documents on `conn` (inside the caller's transaction
        when there is more than one statement); what was written, and the indices whose copy
        was stale."""
        written: list[tuple[UUID, int, OrderAggregate]] = []
        stale: list[int] = []
        for round_ in rounds:
            batch = [(i, *updates[i]) for i in round_]
            await self._update_round(conn, batch, results, copies, written, stale)
        return written, stale

    def _keep(self, order_id: UUID, version: int, aggregate: OrderAggregate) -> None:
        self._kept.pop(order_id, None)
        if not any(step.is_due_or_running for step in aggregate.steps):
            return  # nothing left for a worker to come back to
        self._kept[order_id] = (version, aggregate)
        while len(self._kept) > KEPT_ORDERS:
            self._kept.pop(next(iter(self._kept)))

    async def _update_round(
        self,
        conn: Connection,
        updates: list[tuple[int, UUID, Callable[[OrderAggregate], tuple[Change, T]]]],
        results: dict[int, T | Exception],
        copies: dict[int, Kept],
        written: list[tuple[UUID, int, OrderAggregate]],
        stale: list[int],
    ) -> None:
        unread = [order_id for index, order_id, _ in updates if index not in copies]
        locking = lock_each if self.distributed else lock_aggregates
        aggregates = await locking(conn, unread) if unread else {}
        docs: list[dict[str, Any]] = []
        sent: list[_Sent | None] = []  # per document; None: a rejection on a locked read
        for index, order_id, decide in updates:
            copy = copies.get(index)
            found = (copy[1], copy[0]) if copy is not None else aggregates.get(order_id)
            if found is None:
                results[index] = NotFound(f"order {order_id} not found")
                continue
            try:
                change, results[index] = decide(found[0])
            except Exception as exc:  # a bug in one decision must not hold up the others
                results[index] = exc
                continue
            if change.idempotency is not None or change.processed_event_id is not None:
                if copy is not None:
                    stale.append(index)  # rare, not the executor's: decide on a fresh read
                else:
                    await self._update_alone(conn, index, found[0], change, results)
                continue
            planned = _document(index, found[0], found[1], change, from_copy=copy is not None)
            if planned is _STALE:
                stale.append(index)
            elif isinstance(planned, tuple):
                docs.append(planned[0])
                sent.append(planned[1])
        outcomes = await _commit(conn, docs, sent, one_order=self.distributed)
        self._settle(sent, outcomes, results, written, stale)

    def _settle(
        self,
        sent: list[_Sent | None],
        outcomes: list[Written],
        results: dict[int, Any],
        written: list[tuple[UUID, int, OrderAggregate]],
        stale: list[int],
    ) -> None:
        """What each sent document's outcome means for its caller and the kept copies."""
        for entry, outcome in zip(sent, outcomes, strict=True):
            if entry is None or outcome is Written.SKIPPED:
                continue
            if outcome is Written.APPLIED:
                version = entry.version + 1 if entry.raises_version else entry.version
                written.append((entry.order_id, version, entry.before.with_change(entry.change)))
            elif entry.from_copy:  # the order moved on since this store wrote it
                self._kept.pop(entry.order_id, None)
                stale.append(entry.index)
            else:  # a concurrent writer won after all (its rejection is written)
                results[entry.index] = ConcurrentUpdate(
                    f"the step of {entry.change.guard} changed under a guarded update"
                )

    async def _update_alone(
        self,
        conn: Connection,
        index: int,
        aggregate: OrderAggregate,
        change: Change,
        results: dict[int, Any],
    ) -> None:
        """A change with an idempotency key or an event id: the single-order way, inside the
        batch's transaction."""
        order_id = aggregate.order.order_id
        self._kept.pop(order_id, None)
        try:
            written = await self._commit_alone(conn, aggregate, change)
        except DuplicateIdempotencyKey as exc:
            results[index] = exc
            return
        if written is Written.REJECTED:
            results[index] = ConcurrentUpdate(f"order {order_id} changed under a guarded update")

    async def _commit_alone(
        self, conn: Connection, aggregate: OrderAggregate, change: Change
    ) -> Written:
        """One order's decided change, inside the caller's transaction: its idempotency key and
        processed-event mark are checked first, then it is planned and committed as a group
        commit's documents are (`_document`, `_commit`)."""
        if change.idempotency is not None:
            idem = change.idempotency
            key = _idempotency_key(idem.user_id, idem.scope, idem.key)
            if await fetch_one(conn, "find_idempotency", key) is not None:
                raise DuplicateIdempotencyKey("idempotency key already used")
        if change.processed_event_id is not None:
            event = {"order_id": aggregate.order.order_id, "event_id": change.processed_event_id}
            if await fetch_one(conn, "is_processed_event", event) is not None:
                return Written.SKIPPED
        planned = _document(0, aggregate, 0, change, from_copy=False)
        if not isinstance(planned, tuple):  # nothing to write (never stale: no kept copy)
            return Written.SKIPPED
        [written] = await _commit(conn, [planned[0]], [planned[1]], one_order=self.distributed)
        return written

    async def load(self, order_id: UUID) -> OrderAggregate | None:
        """The order with its steps (and their attempts) and refunds, from one snapshot."""
        async with self._db.connection("load") as conn:
            return await read_aggregate(conn, order_id, lock=False)

    async def load_with_history(
        self, order_id: UUID
    ) -> tuple[OrderAggregate, list[HistoryEntry]] | None:
        """The aggregate and its history, oldest first, from one statement (one snapshot)."""
        async with self._db.connection("load_with_history") as conn:
            return await read_view(conn, order_id)

    async def history(self, order_id: UUID) -> list[HistoryEntry]:
        """Every transition of the order, oldest first."""
        found = await self._fetch_all("history", {"order_id": order_id})
        return [rows.history_from_row(r) for r in found]

    async def audit_entries(self, order_id: UUID) -> list[AuditEntry]:
        """The audit log of the order, oldest first."""
        found = await self._fetch_all("audit_entries", {"order_id": order_id})
        return [rows.audit_from_row(r) for r in found]

    async def find_idempotency(self, user_id: str, scope: str, key: str) -> ApiIdempotency | None:
        """The record a client's idempotency key is bound to, if any."""
        params = _idempotency_key(user_id, scope, key)
        async with self._db.connection("find_idempotency") as conn:
            row = await fetch_one(conn, "find_idempotency", params)
        return rows.idempotency_from_row(row) if row else None

    async def list_orders(
        self,
        *,
        customer_id: str | None,
        state: OrderState | None,
        limit: int,
        before: tuple[datetime, UUID] | None,
    ) -> list[Order]:
        """Orders newest first (created_at, order_id descending), strictly before `before`."""
        params = {
            "customer_id": customer_id,
            "state": state.value if state else None,
            "before_at": before[0] if before else None,
            "before_id": before[1] if before else None,
            "limit": limit,
        }
        return [rows.order_from_row(r) for r in await self._fetch_all("list_orders", params)]

    async def list_waiting(
        self,
        *,
        customer_id: str | None,
        state: OrderState | None,
        limit: int,
        before: tuple[datetime, UUID] | None,
    ) -> list[Order]:
        """Orders waiting for a person, newest waiting first, strictly before `before`."""
        params = {
            "customer_id": customer_id,
            "state": state.value if state else None,
            "before_at": before[0] if before else None,
            "before_id": before[1] if before else None,
            "limit": limit,
        }
        found = await self._fetch_all("list_waiting_orders", params)
        return [rows.order_from_row(r) for r in found]

    async def count_orders(self) -> list[OrderCount]:
        """How many orders there are per (state, attention reason)."""
        found = await self._fetch_all("count_orders", {})
        return [
            OrderCount(OrderState(r["state"]), r["attention_reason"], r["orders"]) for r in found
        ]

    async def claim_due(
        self, *, owner: str, now: datetime, limit: int, lease_s: float
    ) -> list[Claim]:
        """Lease up to `limit` due or lease-expired steps in one statement (attempt + 1)."""
        if limit <= 0:
            return []
        params = claim_params(owner, now, limit, lease_s)
        if self.distributed:
            claims: list[Claim] = []
            for order_id, seqs in await self._candidates(params):
                if len(claims) >= limit:
                    break
                async with self._db.connection("claim_order") as conn:
                    claims.extend(
                        await self._claim_order(conn, params, order_id, seqs, limit - len(claims))
                    )
            return claims
        found = await self._fetch_all("claim_due", params)
        claims, read = _claimed(found)
        # What the statement read of each claimed order, with the claim put in, becomes the
        # copy the attempt's start is decided on (the executor's group commit: no locking
        # read); a copy kept before is replaced, since the claim changed a step of it.
        for claim in claims:
            self._kept.pop(claim.order_id, None)
        for order_id, (version, aggregate) in read.items():
            self._keep(order_id, version, aggregate)
        return claims

    async def claim_and_start(
        self,
        *,
        owner: str,
        now: datetime,
        limit: int,
        lease_s: float,
        start: Callable[[Claim, OrderAggregate], tuple[Change, T]],
    ) -> list[tuple[Claim, T | Exception]]:
        """A claim and the intents it starts in one transaction: BEGIN, `claim_due` (which
        locks each claimed step's order), each start decided on what that statement read
        with the claim put in, one `apply_changes` statement carrying every start, COMMIT. A
        claim is never durable without its intent, and a failed start leaves its step due at
        once instead of leased until its lease runs out. An order whose copy turned out stale
        (changed between the statement's snapshot and its lock) is read again under the
        locks already held and decided afresh. If the transaction fails for anything but an
        unreachable database, nothing of it stays, and the claim is made again with each
        start committed on its own (`claim_due`, then `update_many`), so one order's bad
        start does not hold up the others."""
        if limit <= 0:
            return []
        params = claim_params(owner, now, limit, lease_s)
        try:
            if self.distributed:
                return await self._claim_and_start_by_order(params, limit, start)
            return await self._claimed_and_started(params, start)
        except StoreUnavailable:
            raise
        except Exception as exc:
            log.warning(
                "a claim and its starts failed together (%s: %s); claiming again, each start "
                "on its own",
                type(exc).__name__,
                exc,
            )
        return await claim_then_start(
            self, owner=owner, now=now, limit=limit, lease_s=lease_s, start=start
        )

    async def _claimed_and_started(
        self, params: dict[str, Any], start: Callable[[Claim, OrderAggregate], tuple[Change, T]]
    ) -> list[tuple[Claim, T | Exception]]:
        claims: list[Claim] = []
        try:
            async with self._db.connection("claim_and_start") as conn, conn.transaction():
                claims, read = _claimed(await fetch_all(conn, "claim_due", params))
                updates = [(c.order_id, functools.partial(start, c)) for c in claims]
                results: dict[int, T | Exception] = {}
                rounds = _rounds(updates, range(len(updates)))
                copies = _copies(updates, rounds, read)
                written, stale = await self._write_rounds(conn, updates, rounds, copies, results)
                if stale:  # read again under the locks this transaction holds
                    again, _ = await self._write_rounds(
                        conn, updates, _rounds(updates, stale), {}, results
                    )
                    written.extend(again)
        finally:  # committed or not, the claim changed a step of each: no copy kept before holds
            for claim in claims:
                self._kept.pop(claim.order_id, None)
        for order_id, version, aggregate in written:
            self._keep(order_id, version, aggregate)
        return [(claim, results[i]) for i, claim in enumerate(claims)]

    async def _candidates(self, params: dict[str, Any]) -> list[tuple[UUID, list[int]]]:
        """On Citus: the due steps' orders, earliest due first, each with its due steps (one
        unlocked read across the shards)."""
        found = await self._fetch_all("claim_candidates", params)
        orders: dict[UUID, list[int]] = {}
        for row in found:
            orders.setdefault(row["order_id"], []).append(row["seq"])
        return list(orders.items())

    async def _claim_order(
        self, conn: Connection, params: dict[str, Any], order_id: UUID, seqs: list[int], room: int
    ) -> list[Claim]:
        """On Citus: claim up to `room` of one order's candidate steps on `conn` (one shard),
        keeping what the statement read as the order's copy."""
        found = await fetch_all(
            conn, "claim_order", {**params, "order_id": order_id, "seqs": seqs[:room]}
        )
        claims, read = _claimed(found)
        self._kept.pop(order_id, None)
        for kept_id, (version, aggregate) in read.items():
            self._keep(kept_id, version, aggregate)
        return claims

    async def _claim_and_start_by_order(
        self,
        params: dict[str, Any],
        limit: int,
        start: Callable[[Claim, OrderAggregate], tuple[Change, T]],
    ) -> list[tuple[Claim, T | Exception]]:
        """On Citus: `claim_and_start` one order at a time, each its own one-shard transaction
        (BEGIN, `claim_order`, the starts decided on what it read, their write, COMMIT), the
        orders in the order their steps fell due. An order another claim holds is skipped."""
        done: list[tuple[Claim, T | Exception]] = []
        for order_id, seqs in await self._candidates(params):
            if len(done) >= limit:
                break
            claims: list[Claim] = []
            results: dict[int, T | Exception] = {}
            try:
                async with self._db.connection("claim_and_start") as conn, conn.transaction():
                    found = await fetch_all(
                        conn,
                        "claim_order",
                        {**params, "order_id": order_id, "seqs": seqs[: limit - len(done)]},
                    )
                    claims, read = _claimed(found)
                    updates = [(c.order_id, functools.partial(start, c)) for c in claims]
                    rounds = _rounds(updates, range(len(updates)))
                    copies = _copies(updates, rounds, read)
                    written, stale = await self._write_rounds(
                        conn, updates, rounds, copies, results
                    )
                    if stale:
                        again, _ = await self._write_rounds(
                            conn, updates, _rounds(updates, stale), {}, results
                        )
                        written.extend(again)
            finally:
                self._kept.pop(order_id, None)
            for kept_id, version, aggregate in written:
                self._keep(kept_id, version, aggregate)
            done.extend((claim, results[i]) for i, claim in enumerate(claims))
        return done

    async def renew_lease(self, claim: Claim, *, now: datetime, lease_s: float) -> bool:
        """Extend the lease while (attempt, owner, running, not expired) hold; False otherwise."""
        params = {
            "order_id": claim.order_id,  # a step is found through its order (the key)
            "step_id": claim.step_id,
            "attempt": claim.attempt,
            "owner": claim.owner,
            "now": now,
            "expires_at": now + timedelta(seconds=lease_s),
        }
        self._kept.pop(claim.order_id, None)  # its lease changes: read the order next time
        async with self._db.connection("renew_lease") as conn:
            return await execute(conn, "renew_lease", params) == 1

    async def events(self, *, after: int, limit: int) -> list[OutboxEvent]:
        """Published outbox events with seq > after, in feed (seq) order."""
        # Retention: `after=0` starts at the feed's floor; a cursor below it is refused (410),
        # never served a gap. The floor is read after the page, so one raised meanwhile counts.
        start = after or await self._feed_floor()
        while True:
            found = await self._fetch_all("events", {"after": start, "limit": limit})
            floor = await self._feed_floor()
            if after == 0 and floor > start:
                start = floor  # pruned under a fresh reader: read from the new floor
                continue
            check_feed_cursor(start, floor)
            return [rows.event_from_row(r) for r in found]

    async def _feed_floor(self) -> int:
        async with self._db.connection("feed_floor") as conn:
            return await feed_floor(conn)

    async def unpublished_events(self, limit: int) -> list[OutboxEvent]:
        """Events the outbox relay has not handed on yet, oldest first, up to the seq no
        running transaction can undercut any more (`orderflow_pg.feed`)."""
        seen = await self._fetch_all("feed_horizon", {})
        through = self._horizon.observe(seen[0]["top"], seen[0]["writing"])
        if through is None:
            return []
        found = await self._fetch_all("unpublished_events", {"limit": limit, "through": through})
        return [rows.event_from_row(r) for r in found]

    async def mark_published(self, seqs: list[int], now: datetime) -> None:
        """Move the feed position through these events (a prefix of `unpublished_events`)."""
        if seqs:
            async with self._db.connection("mark_published") as conn:
                await execute(conn, "mark_published", {"through": max(seqs)})

    async def ping(self) -> bool:
        """Readiness: whether the database answers within the deadline."""
        try:
            await self._fetch_all("ping", {})
        except StoreUnavailable:
            return False
        return True

    async def autovacuum_on(self) -> bool:
        """Whether the server runs autovacuum, which keeps the tables' statistics fresh (and so
        the plans each connection caches as the tables grow)."""
        found = await self._fetch_all("autovacuum", {})
        return bool(found) and found[0]["autovacuum"] != "off"

    async def migrations_current(self) -> bool:
        """Readiness: every migration file shipped with this code is applied, unchanged."""
        async with self._db.connection("migrations_current") as conn:
            return not await pending_migrations(conn)

    async def _fetch_all(self, name: str, params: dict[str, Any]) -> list[rows.Row]:
        async with self._db.connection(name) as conn:
            return await fetch_all(conn, name, params)


class Written(enum.Enum):
    """What became of one order's decided change at its commit (`_commit`)."""

    APPLIED = "applied"  # written, every part of it
    REJECTED = "rejected"  # fenced off at the write: nothing of it written (see `_commit`)
    SKIPPED = "skipped"  # nothing of it to write, or only the rejection its read foresaw


async def _commit(
    conn: Connection, docs: list[dict[str, Any]], sent: list[_Sent | None], *, one_order: bool
) -> list[Written]:
    """The one commit helper of `update` and the group commit (so of the batch start): every
    planned document (`_document`) in one `apply_changes` statement, then, in a second
    statement on the same connection, the rejection of each change fenced off at the write
    (unless it was decided on a kept copy: that one is decided again on a fresh read). A
    document without a `_Sent` (a rejection the read foresaw) is SKIPPED: its change wrote
    nothing, whatever the statement did."""
    applied = await _apply(conn, docs, one_order=one_order)
    outcomes = [
        Written.SKIPPED if entry is None else Written.APPLIED if ok else Written.REJECTED
        for entry, ok in zip(sent, applied, strict=True)
    ]
    rejections = [
        rejection_doc(entry.change)
        for entry, outcome in zip(sent, outcomes, strict=True)
        if entry is not None and outcome is Written.REJECTED and not entry.from_copy
    ]
    await _apply(conn, [d for d in rejections if d is not None], one_order=one_order)
    return outcomes


@attrs.frozen
class _Sent:
    """A document of a group commit whose outcome matters, and what it was decided on."""

    index: int
    order_id: UUID
    version: int
    before: OrderAggregate
    change: Change
    from_copy: bool
    raises_version: bool


_STALE = object()  # decide again on a fresh read


def _document(
    index: int, before: OrderAggregate, version: int, change: Change, *, from_copy: bool
) -> tuple[dict[str, Any], _Sent | None] | object | None:
    """The document to send for a decided change (None: nothing to write; `_STALE`: the kept
    copy cannot tell, read the order). A change decided on a kept copy carries what the copy
    expects of the order, rejections included."""
    if change.guard is not None and not before.holds(change.guard):
        doc = rejection_doc(change)
        if not from_copy:
            return None if doc is None else (doc, None)
        if doc is None or change.on_reject is None:
            return _STALE
        change = Change(audit=(change.on_reject,))
    elif change.is_empty:
        return _STALE if from_copy else None
    else:
        doc = change_doc(change, before)
    if from_copy:
        doc = expecting(doc, version, before)
    order_id = before.order.order_id
    return doc, _Sent(index, order_id, version, before, change, from_copy, "order" in doc)


def _idempotency_key(user_id: str, scope: str, key: str) -> dict[str, Any]:
    """The parameters of `find_idempotency`: the key and where it is kept."""
    placement = ids.idempotency_placement(user_id, scope, key)
    return {"placement": placement, "user_id": user_id, "scope": scope, "key": key}


async def _apply(conn: Connection, docs: list[dict[str, Any]], *, one_order: bool) -> list[bool]:
    """`apply_documents`, each document in its own one-order statement on Citus."""
    if one_order:
        return await apply_documents(conn, docs, one_order=True)
    return await apply_documents(conn, docs)


def _settle(future: asyncio.Future[None], failure: Exception | None) -> None:
    if future.done():  # its caller was cancelled meanwhile
        return
    if failure is None:
        future.set_result(None)
    else:
        future.set_exception(failure)


# How many due steps (and how many lease-expired ones) a claim considers beyond the ones it
# wants: candidates whose orders other claims hold are skipped, not waited for.
CLAIM_WINDOW_EXTRA = 16


def claim_params(owner: str, now: datetime, limit: int, lease_s: float) -> dict[str, Any]:
    """The parameters of `claim_due`."""
    return {
        "owner": owner,
        "now": now,
        "expires_at": now + timedelta(seconds=lease_s),
        "limit": limit,
        "window": 2 * limit + CLAIM_WINDOW_EXTRA,
    }


def _claimed(found: Sequence[rows.Row]) -> tuple[list[Claim], dict[UUID, Kept]]:
    """The claims a `claim_due` statement returned, and per claimed order the copy its
    start is decided on: what the statement read, with the claims put in."""
    claims = [rows.claim_from_row(r) for r in found]
    read = claimed_aggregates(found, claims)
    return claims, {order_id: (version, agg) for order_id, (agg, version) in read.items()}


def _copies(
    updates: Sequence[tuple[UUID, object]], rounds: list[list[int]], source: Mapping[UUID, Kept]
) -> dict[int, Kept]:
    """The copies to decide the first round on, by update index: only when every order is in
    one round (a second change of an order is decided on what its first one wrote)."""
    if len(rounds) != 1:
        return {}
    return {i: source[updates[i][0]] for i in rounds[0] if updates[i][0] in source}


def _rounds(updates: Sequence[tuple[UUID, object]], indices: Iterable[int]) -> list[list[int]]:
    """`indices` split into rounds in which each order appears once, in the given order."""
    rounds: list[list[int]] = []
    seen: dict[UUID, int] = {}  # per order, how many rounds hold it so far
    for index in indices:
        order_id = updates[index][0]
        position = seen.get(order_id, 0)  # the first round without it
        seen[order_id] = position + 1
        if position == len(rounds):
            rounds.append([])
        rounds[position].append(index)
    return rounds
