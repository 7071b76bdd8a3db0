"""`PgOrderStore`: the `OrderStore` port on PostgreSQL, one transaction per unit of work.

Here: opening the store, the reads, the claims (and `claim_and_start`), the lease, the outbox
feed and readiness. How orders are written (the create batcher, the group commit's write rounds
and the kept copies they decide on) is the write engine, `orderflow_pg.write_engine`."""

from __future__ import annotations

import functools
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID

from orderflow_core.commits import SingleWriter
from orderflow_core.errors import StoreUnavailable
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
from orderflow_pg.feed import FeedHorizon
from orderflow_pg.migrate import pending_migrations
from orderflow_pg.prune import check_feed_cursor, feed_floor
from orderflow_pg.queries import Connection, execute, fetch_all, fetch_one
from orderflow_pg.reads import (
    claimed_aggregates,
    read_aggregate,
    read_view,
)
from orderflow_pg.users import PgUsers
from orderflow_pg.write_engine import (
    MAX_CREATES_PER_COMMIT,
    KeptCopy,
    PgWriteEngine,
    first_round_copies,
    idempotency_key_params,
    write_rounds,
)
from orderflow_pg.writes import insert_new_order

T = TypeVar("T")

log = logging.getLogger("orderflow.store")


class PgOrderStore(PgWriteEngine):
    """Durable orders on PostgreSQL: what makes the saga survive crashes and scale out."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self.users = PgUsers(database)
        self._create_batcher = SingleWriter(
            self._commit_creates, max_batch=MAX_CREATES_PER_COMMIT, name="batch of creates"
        )
        # The kept copies (`orderflow_pg.write_engine`), oldest first.
        self._kept_copies: OrderedDict[UUID, KeptCopy] = OrderedDict()
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
        optimisations: bool = True,
    ) -> AsyncIterator[PgOrderStore]:
        """A store on a fresh pool; size it for the executor's concurrency plus the API.

        Opening waits up to `connect_timeout_s` for `min_size` connections, then raises
        `StoreUnavailable`. Without `optimisations`, a `PlainPgOrderStore`: the contract alone
        (no create batcher, no group commit, no claim with its starts, no kept copies).
        """
        async with Database.open(
            url,
            min_size=min_size,
            max_size=max_size,
            statement_timeout_s=statement_timeout_s,
            connect_timeout_s=connect_timeout_s,
            transaction_pooler=transaction_pooler,
        ) as database:
            store = cls(database) if optimisations else PlainPgOrderStore(database)
            store.distributed = await store._distributed()
            yield store

    async def _distributed(self) -> bool:
        async with self._db.connection("citus_installed") as conn:
            found = await fetch_one(conn, "citus_installed")
            if not (found and found["installed"]):
                return False
            tables = await fetch_all(conn, "citus_tables")
        return "orders" in {r["name"] for r in tables}

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
        params = idempotency_key_params(user_id, scope, key)
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
            self._forget_copy(claim.order_id)
        for order_id, (version, aggregate) in read.items():
            self._keep_copy(order_id, version, aggregate)
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
        claims = await self.claim_due(owner=owner, now=now, limit=limit, lease_s=lease_s)
        started = await self.update_many(
            [(claim.order_id, functools.partial(start, claim)) for claim in claims]
        )
        return list(zip(claims, started, strict=True))

    async def _claimed_and_started(
        self, params: dict[str, Any], start: Callable[[Claim, OrderAggregate], tuple[Change, T]]
    ) -> list[tuple[Claim, T | Exception]]:
        claims: list[Claim] = []
        try:
            async with self._db.connection("claim_and_start") as conn, conn.transaction():
                claims, read = _claimed(await fetch_all(conn, "claim_due", params))
                updates = [(c.order_id, functools.partial(start, c)) for c in claims]
                results: dict[int, T | Exception] = {}
                rounds = write_rounds(updates, range(len(updates)))
                copies = first_round_copies(updates, rounds, read)
                written, stale = await self._write_rounds(conn, updates, rounds, copies, results)
                if stale:  # read again under the locks this transaction holds
                    again, _ = await self._write_rounds(
                        conn, updates, write_rounds(updates, stale), {}, results
                    )
                    written.extend(again)
        finally:  # committed or not, the claim changed a step of each: no copy kept before holds
            for claim in claims:
                self._forget_copy(claim.order_id)
        for order_id, version, aggregate in written:
            self._keep_copy(order_id, version, aggregate)
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
        self._forget_copy(order_id)
        for kept_id, (version, aggregate) in read.items():
            self._keep_copy(kept_id, version, aggregate)
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
                    rounds = write_rounds(updates, range(len(updates)))
                    copies = first_round_copies(updates, rounds, read)
                    written, stale = await self._write_rounds(
                        conn, updates, rounds, copies, results
                    )
                    if stale:
                        again, _ = await self._write_rounds(
                            conn, updates, write_rounds(updates, stale), {}, results
                        )
                        written.extend(again)
            finally:
                self._forget_copy(order_id)
            for kept_id, version, aggregate in written:
                self._keep_copy(kept_id, version, aggregate)
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
        self._forget_copy(claim.order_id)  # its lease changes: read the order next time
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


def _claimed(found: Sequence[rows.Row]) -> tuple[list[Claim], dict[UUID, KeptCopy]]:
    """The claims a `claim_due` statement returned, and per claimed order the copy its
    start is decided on: what the statement read, with the claims put in."""
    claims = [rows.claim_from_row(r) for r in found]
    read = claimed_aggregates(found, claims)
    return claims, {order_id: (version, agg) for order_id, (agg, version) in read.items()}


class PlainPgOrderStore(PgOrderStore):
    """`PgOrderStore` without its optimisations (`ORDERFLOW_STORE_OPTIMISATIONS=0`): the
    `UnitOfWork` contract alone, each unit of work its own transaction. Every create is its own
    statement (no create batcher); it offers neither `GroupCommits` nor `ClaimsWithStarts`, so
    the executor writes each start and result with `update`; and it keeps no copy of an order,
    so every change is decided on a locking read. For comparing, and for a fault that one of
    the optimisations might hide: the behaviour suite runs both ways."""

    # A capability set to None is one the store does not offer (`isinstance` on the protocols).
    update_many = None  # type: ignore[assignment]
    claim_and_start = None  # type: ignore[assignment]

    async def create(self, change: Change) -> None:
        """Insert a new order and its first steps in a statement of its own."""
        if change.order is None:
            raise ValueError("create needs an order")
        async with self._db.connection("create") as conn:
            await insert_new_order(conn, change, one_order=self.distributed)

    def _keep_copy(self, order_id: UUID, version: int, aggregate: OrderAggregate) -> None:
        """No kept copies."""
        del order_id, version, aggregate
