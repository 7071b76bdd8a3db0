"""The PostgreSQL write engine behind `PgOrderStore`: how its orders are written.

Three parts, each named where it is defined:

- the **create batcher** (`create`, a `SingleWriter` as the executor's results have): one
  writer task sends every create queued while its previous statement ran as one
  `apply_changes` statement (a group commit of creates);
- the **kept copies** (`KeptCopy`, `_keep_copy`, `_forget_copy`): per order this store wrote
  or claimed a step of last, the version and aggregate it wrote, so the order's next change is
  decided without a locking read; a copy is dropped (`_forget_copy`) whenever something else
  may have changed its order (an API update, a claim, a lease renewal, a stale write);
- the **write rounds** (`write_rounds`, `_write_rounds`): a group commit (`update_many`, and the
  starts of `claim_and_start`) split into rounds in which each order appears once, each round
  one `apply_changes` statement whose documents are fenced by their guards (`_commit`).

All three are optimisations over the store's contract (`UnitOfWork`); `update_many` and
`claim_and_start` are the optional capabilities `GroupCommits` and `ClaimsWithStarts`.
`PlainPgOrderStore` (`ORDERFLOW_STORE_OPTIMISATIONS=0`) turns them all off: `create` and
`update` alone, each its own transaction, deciding on a locking read.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar
from uuid import UUID

import attrs

from orderflow_core import ids
from orderflow_core.commits import SingleWriter
from orderflow_core.errors import (
    ConcurrentUpdate,
    DuplicateIdempotencyKey,
    NotFound,
    StoreUnavailable,
)
from orderflow_core.model import Change, OrderAggregate
from orderflow_pg.database import Database
from orderflow_pg.queries import Connection, fetch_one
from orderflow_pg.reads import lock_aggregates, lock_each, read_aggregate
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
# A kept copy of an order (the cache the group commit decides on without a locking read): its
# version and its aggregate as this store last wrote or claimed it.
KeptCopy = tuple[int, OrderAggregate]
# The most creates one statement carries (what queued beyond waits for the next).
MAX_CREATES_PER_COMMIT = 64


class PgWriteEngine:
    """The writes of `PgOrderStore` (its base class): the create batcher, the group commit in
    write rounds, and the kept copies they decide on. `PgOrderStore.__init__` sets the state
    below."""

    _db: Database
    # The create batcher: the API's creates, grouped by one writer.
    _create_batcher: SingleWriter[Change, None]
    # Per order this store wrote or claimed a step of last: (version, aggregate) as written
    # or as the claim read it with the claim put in, oldest first.
    _kept_copies: OrderedDict[UUID, KeptCopy]
    distributed: bool

    async def create(self, change: Change) -> None:
        """Insert a new order and its first steps; `DuplicateIdempotencyKey` if the key exists.

        Concurrent creates share a commit (the create batcher, a `SingleWriter`): every create
        queued while the previous statement ran goes as one `apply_changes` statement in
        autocommit (when idle, a create goes out at once). Each caller returns only after the
        statement that carried its order committed. If that statement fails for anything but
        an unreachable database (a reused idempotency key in the batch), each create is
        retried alone, so only the failing one fails."""
        if change.order is None:
            raise ValueError("create needs an order")
        await self._create_batcher.submit(change)

    async def _commit_creates(self, batch: list[Change]) -> list[Exception | None]:
        """One batch of creates: each create's outcome (None: committed)."""
        if self.distributed and len(batch) > 1:  # one order, one shard: each on its own
            alone = await asyncio.gather(*(self._commit_creates([c]) for c in batch))
            return [outcome for [outcome] in alone]
        try:
            async with self._db.connection("create") as conn:
                docs = [change_doc(c, new=True) for c in batch]
                await _apply(conn, docs, one_order=self.distributed)
        except (asyncio.CancelledError, StoreUnavailable):
            raise
        except Exception as exc:
            if len(batch) == 1:
                return [exc]
            outcomes: list[Exception | None] = []
            for change in batch:  # each alone: only the failing create fails
                try:
                    async with self._db.connection("create") as conn:
                        await insert_new_order(conn, change, one_order=self.distributed)
                except asyncio.CancelledError:
                    raise
                except Exception as failed:
                    outcomes.append(failed)
                else:
                    outcomes.append(None)
            return outcomes
        return [None] * len(batch)

    async def update(
        self, order_id: UUID, decide: Callable[[OrderAggregate], tuple[Change, T]]
    ) -> T:
        """Lock the order, decide, apply the change (or only its rejection), return the value.

        Four statements: BEGIN, the locking read, the change, COMMIT. (Pipelining them costs
        the client more CPU than the round trips it saves on a local server.) A change fenced
        off at the write wrote nothing; only its rejection is recorded. A copy of the order
        this store kept is dropped (none is kept from here: API commands rarely repeat)."""
        self._forget_copy(order_id)
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
                self._forget_copy(order_id)
            raise
        except Exception as exc:
            for order_id, _ in updates:
                self._forget_copy(order_id)
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
        rounds = write_rounds(updates, indices)
        copies = first_round_copies(updates, rounds, self._kept_copies if kept else {})
        reads = len(rounds) > 1 or len(copies) < len(rounds[0])
        async with self._db.connection("update_many") as conn:
            transaction = conn.transaction() if reads else contextlib.nullcontext()
            async with transaction:
                written, stale = await self._write_rounds(conn, updates, rounds, copies, results)
        for order_id, version, aggregate in written:  # committed: keep what was written
            self._keep_copy(order_id, version, aggregate)
        return stale

    async def _write_rounds(
        self,
        conn: Connection,
        updates: Sequence[tuple[UUID, Callable[[OrderAggregate], tuple[Change, T]]]],
        rounds: list[list[int]],
        copies: dict[int, KeptCopy],
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

    def _keep_copy(self, order_id: UUID, version: int, aggregate: OrderAggregate) -> None:
        """The kept copies: remember what was written of an order (newest last), if a worker
        will come back to it, forgetting the oldest beyond `KEPT_ORDERS`."""
        self._forget_copy(order_id)
        if not any(step.is_due_or_running for step in aggregate.steps):
            return  # nothing left for a worker to come back to
        self._kept_copies[order_id] = (version, aggregate)
        while len(self._kept_copies) > KEPT_ORDERS:
            self._kept_copies.pop(next(iter(self._kept_copies)))

    def _forget_copy(self, order_id: UUID) -> None:
        """The kept copies: drop an order's, because something other than this store's last
        write may have changed the order since (an API update, a claim, a lease renewal, a
        stale write); its next change reads it afresh."""
        self._kept_copies.pop(order_id, None)

    async def _update_round(
        self,
        conn: Connection,
        updates: list[tuple[int, UUID, Callable[[OrderAggregate], tuple[Change, T]]]],
        results: dict[int, T | Exception],
        copies: dict[int, KeptCopy],
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
                self._forget_copy(entry.order_id)
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
        self._forget_copy(order_id)
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
            key = idempotency_key_params(idem.user_id, idem.scope, idem.key)
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


def idempotency_key_params(user_id: str, scope: str, key: str) -> dict[str, Any]:
    """The parameters of `find_idempotency`: the key and where it is kept."""
    placement = ids.idempotency_placement(user_id, scope, key)
    return {"placement": placement, "user_id": user_id, "scope": scope, "key": key}


async def _apply(conn: Connection, docs: list[dict[str, Any]], *, one_order: bool) -> list[bool]:
    """`apply_documents`, each document in its own one-order statement on Citus."""
    if one_order:
        return await apply_documents(conn, docs, one_order=True)
    return await apply_documents(conn, docs)


def first_round_copies(
    updates: Sequence[tuple[UUID, object]], rounds: list[list[int]], source: Mapping[UUID, KeptCopy]
) -> dict[int, KeptCopy]:
    """The copies to decide the first round on, by update index: only when every order is in
    one round (a second change of an order is decided on what its first one wrote)."""
    if len(rounds) != 1:
        return {}
    return {i: source[updates[i][0]] for i in rounds[0] if updates[i][0] in source}


def write_rounds(updates: Sequence[tuple[UUID, object]], indices: Iterable[int]) -> list[list[int]]:
    """The write rounds: `indices` split into rounds in which each order appears once, in the
    given order."""
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
