"""`PgOrderStore`: the `OrderStore` port on PostgreSQL, one transaction per unit of work."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID

from psycopg import AsyncCursor

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
from orderflow_core.ports import OrderCount
from orderflow_core.states import OrderState
from orderflow_pg import rows
from orderflow_pg.database import Database
from orderflow_pg.migrate import pending_migrations
from orderflow_pg.queries import Connection, execute, fetch_all, fetch_one
from orderflow_pg.reads import lock_aggregates, read_aggregate, read_view
from orderflow_pg.users import PgUsers
from orderflow_pg.writes import (
    GuardLost,
    apply_documents,
    apply_update,
    change_doc,
    insert_new_order,
    rejection_doc,
    was_applied,
    write_rejection,
)

T = TypeVar("T")

log = logging.getLogger("orderflow.store")


class PgOrderStore:
    """Durable orders on PostgreSQL: what makes the saga survive crashes and scale out."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self.users = PgUsers(database)
        # Tests set this to fail a transition between its statements (as the in-memory store).
        self.fail_after_order_write: Exception | None = None

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
        ) as database:
            yield cls(database)

    async def create(self, change: Change) -> None:
        """Insert a new order and its first steps; `DuplicateIdempotencyKey` if the key exists."""
        # One statement in autocommit: its own transaction, one round trip.
        async with self._db.connection("create") as conn:
            await insert_new_order(conn, change)

    async def update(
        self, order_id: UUID, decide: Callable[[OrderAggregate], tuple[Change, T]]
    ) -> T:
        """Lock the order, decide, apply the change (or only its rejection), return the value.

        Four statements: BEGIN, the locking read, the change, COMMIT. (Pipelining them costs
        the client more CPU than the round trips it saves on a local server.) A change fenced
        off at the write wrote nothing; only its rejection is recorded.
        """
        async with self._db.connection("update") as conn:
            async with conn.transaction():
                aggregate = await read_aggregate(conn, order_id, lock=True)
                if aggregate is None:
                    raise NotFound(f"order {order_id} not found")
                change, value = decide(aggregate)
                sent = await self._apply_decided(conn, aggregate, change)
            # Decide accepted the guard but the write may have found it fenced off: then do
            # not hand back a value that belongs to no commit.
            if sent is not None and (fenced := await _fenced_off(conn, sent, change, order_id)):
                raise fenced
            return value

    async def update_many(
        self, updates: Sequence[tuple[UUID, Callable[[OrderAggregate], tuple[Change, T]]]]
    ) -> list[T | Exception]:
        """A group commit: BEGIN, one locking read of every order, the decisions, one
        `apply_changes` statement carrying every order's document (each fenced by its own
        guard), COMMIT. Pairs of an order already in the batch go in a second round inside the
        same transaction (after the first has been written). If the shared transaction fails
        for anything but an unreachable database, each order is retried alone, once, so one
        order's bad write does not fail the others."""
        if not updates:
            return []
        try:
            async with self._db.connection("update_many") as conn, conn.transaction():
                return await self._update_batch(conn, updates)
        except StoreUnavailable:
            raise
        except Exception as exc:
            if len(updates) == 1:
                return [exc]
            log.warning(
                "a group commit of %d orders failed (%s: %s); each order is retried alone",
                len(updates),
                type(exc).__name__,
                exc,
            )
        results: list[T | Exception] = []
        for order_id, decide in updates:
            try:
                results.append(await self.update(order_id, decide))
            except StoreUnavailable:
                raise
            except Exception as exc:  # this order's own failure
                results.append(exc)
        return results

    async def start_claimed(
        self,
        claims: Sequence[Claim],
        decide: Callable[[OrderAggregate, Claim], tuple[Change, T]],
    ) -> list[T | Exception]:
        """Every claim's `update` as one group commit (`update_many`)."""
        return await self.update_many(
            [(claim.order_id, functools.partial(_for_claim, decide, claim)) for claim in claims]
        )

    async def _update_batch(
        self,
        conn: Connection,
        updates: Sequence[tuple[UUID, Callable[[OrderAggregate], tuple[Change, T]]]],
    ) -> list[T | Exception]:
        results: dict[int, T | Exception] = {}
        remaining = list(range(len(updates)))
        while remaining:  # rounds in which each order appears once
            round_: list[int] = []
            later: list[int] = []
            seen: set[UUID] = set()
            for index in remaining:
                order_id = updates[index][0]
                (later if order_id in seen else round_).append(index)
                seen.add(order_id)
            await self._update_round(conn, [(i, *updates[i]) for i in round_], results)
            remaining = later
        return [results[i] for i in range(len(updates))]

    async def _update_round(
        self,
        conn: Connection,
        updates: list[tuple[int, UUID, Callable[[OrderAggregate], tuple[Change, T]]]],
        results: dict[int, T | Exception],
    ) -> None:
        aggregates = await lock_aggregates(conn, [order_id for _, order_id, _ in updates])
        docs: list[dict[str, Any]] = []
        fenced: list[tuple[int, Change] | None] = []  # per document: whose change, if guarded
        for index, order_id, decide in updates:
            aggregate = aggregates.get(order_id)
            if aggregate is None:
                results[index] = NotFound(f"order {order_id} not found")
                continue
            try:
                change, results[index] = decide(aggregate)
            except Exception as exc:  # a bug in one decision must not hold up the others
                results[index] = exc
                continue
            if change.idempotency is not None or change.processed_event_id is not None:
                # Not on the executor's path: the single-order way, inside this transaction.
                try:
                    sent = await self._apply_decided(conn, aggregate, change)
                except DuplicateIdempotencyKey as exc:
                    results[index] = exc
                    continue
                if sent is not None and (lost := await _fenced_off(conn, sent, change, order_id)):
                    results[index] = lost
                continue
            if change.guard is not None and not aggregate.holds(change.guard):
                if (rejection := rejection_doc(change)) is not None:
                    docs.append(rejection)
                    fenced.append(None)
                continue
            if not change.is_empty:
                docs.append(change_doc(change, aggregate))
                fenced.append((index, change))
        fail = self.fail_after_order_write
        writes_order = any(f is not None and f[1].order is not None for f in fenced)
        applied = await apply_documents(conn, docs, fail if writes_order else None)
        rejections: list[dict[str, Any]] = []
        for guarded, ok in zip(fenced, applied, strict=True):
            if guarded is not None and not ok:  # a concurrent writer won after all
                index, change = guarded
                results[index] = ConcurrentUpdate(
                    f"the step of {change.guard} changed under a guarded update"
                )
                if (rejection := rejection_doc(change)) is not None:
                    rejections.append(rejection)
        await apply_documents(conn, rejections)

    async def _apply_decided(
        self, conn: Connection, aggregate: OrderAggregate, change: Change
    ) -> AsyncCursor[Any] | None:
        if change.idempotency is not None:
            idem = change.idempotency
            key = {"user_id": idem.user_id, "scope": idem.scope, "key": idem.key}
            if await fetch_one(conn, "find_idempotency", key) is not None:
                raise DuplicateIdempotencyKey("idempotency key already used")
        if change.processed_event_id is not None:
            event = {"event_id": change.processed_event_id}
            if await fetch_one(conn, "is_processed_event", event) is not None:
                return None
        if change.guard is not None and not aggregate.holds(change.guard):
            await write_rejection(conn, change)
            return None
        if change.is_empty:
            return None
        return await apply_update(conn, aggregate, change, self.fail_after_order_write)

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
        params = {"user_id": user_id, "scope": scope, "key": key}
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
        params = {
            "owner": owner,
            "now": now,
            "expires_at": now + timedelta(seconds=lease_s),
            "limit": limit,
        }
        return [rows.claim_from_row(r) for r in await self._fetch_all("claim_due", params)]

    async def renew_lease(self, claim: Claim, *, now: datetime, lease_s: float) -> bool:
        """Extend the lease while (attempt, owner, running, not expired) hold; False otherwise."""
        params = {
            "step_id": claim.step_id,
            "attempt": claim.attempt,
            "owner": claim.owner,
            "now": now,
            "expires_at": now + timedelta(seconds=lease_s),
        }
        async with self._db.connection("renew_lease") as conn:
            return await execute(conn, "renew_lease", params) == 1

    async def events(self, *, after: int, limit: int) -> list[OutboxEvent]:
        """Outbox events with seq > after, oldest first."""
        found = await self._fetch_all("events", {"after": after, "limit": limit})
        return [rows.event_from_row(r) for r in found]

    async def unpublished_events(self, limit: int) -> list[OutboxEvent]:
        """Events the outbox relay has not handed on yet, oldest first."""
        found = await self._fetch_all("unpublished_events", {"limit": limit})
        return [rows.event_from_row(r) for r in found]

    async def mark_published(self, seqs: list[int], now: datetime) -> None:
        """Record that the relay handed these events on, so it does not send them again."""
        if seqs:
            async with self._db.connection("mark_published") as conn:
                await execute(conn, "mark_published", {"seqs": seqs, "now": now})

    async def ping(self) -> bool:
        """Readiness: whether the database answers within the deadline."""
        try:
            await self._fetch_all("ping", {})
        except StoreUnavailable:
            return False
        return True

    async def migrations_current(self) -> bool:
        """Readiness: every migration file shipped with this code is applied, unchanged."""
        async with self._db.connection("migrations_current") as conn:
            return not await pending_migrations(conn)

    async def _fetch_all(self, name: str, params: dict[str, Any]) -> list[rows.Row]:
        async with self._db.connection(name) as conn:
            return await fetch_all(conn, name, params)


async def _fenced_off(
    conn: Connection, sent: AsyncCursor[Any], change: Change, order_id: UUID
) -> ConcurrentUpdate | None:
    """If the change `apply_update` sent was fenced off (it wrote nothing), record only its
    rejection and say so; None when it was applied."""
    try:
        await was_applied(sent)
    except GuardLost:
        await write_rejection(conn, change)
        return ConcurrentUpdate(f"order {order_id} changed under a guarded update")
    return None


def _for_claim(
    decide: Callable[[OrderAggregate, Claim], tuple[Change, T]],
    claim: Claim,
    aggregate: OrderAggregate,
) -> tuple[Change, T]:
    return decide(aggregate, claim)
