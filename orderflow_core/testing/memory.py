"""An in-memory `OrderStore` (both its `UnitOfWork` and `OrderReads` sides, and the relay's
`OutboxFeed`): the same behaviour as the PostgreSQL store, kept in dicts; and `NoWakeUps`."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TypeVar
from uuid import UUID

import attrs

from orderflow_core.errors import DuplicateIdempotencyKey, NotFound
from orderflow_core.model import (
    ApiIdempotency,
    AuditEntry,
    Change,
    Claim,
    HistoryEntry,
    Order,
    OrderAggregate,
    OutboxEvent,
    Principal,
    Step,
)
from orderflow_core.ports import OrderCount
from orderflow_core.states import DUE_STATUSES, OrderState, StepStatus

T = TypeVar("T")


class NoWakeUps:
    """The in-memory `WakeUps`: announces nothing, so executors find work by polling alone
    (a FakeClock-driven test decides when they poll)."""

    async def listen(self, wake: Callable[[], None]) -> None:
        await asyncio.Event().wait()  # until cancelled


class InMemoryOrderStore:
    """A structural, inspectable store: every committed change is kept in `committed`. Of the
    writing side it offers the `UnitOfWork` contract alone (no `GroupCommits`, no
    `ClaimsWithStarts`), as a store of one's own may: the executor then writes each result and
    each start with `update`."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self.aggregates: dict[UUID, OrderAggregate] = {}
        self.history_log: dict[UUID, list[HistoryEntry]] = {}
        self.audit_log: list[AuditEntry] = []
        self.outbox: list[OutboxEvent] = []
        self.idempotency: dict[tuple[str, str, str], ApiIdempotency] = {}
        self.processed_events: set[UUID] = set()
        self.committed: list[Change] = []
        self.feed: list[OutboxEvent] = []  # published events, numbered in publication order
        # Indexes over the lists above, so a write, a claim and the relay cost what they touch,
        # not every order and event kept so far: the outbox's event ids, its events not yet
        # published (by outbox seq, in outbox order), the orders with a step due or running,
        # and each order's place in creation order (claims break ties by it, as a scan of
        # `aggregates` in insertion order would).
        self._event_ids: set[UUID] = set()
        self._unpublished: dict[int, OutboxEvent] = {}
        self._live: set[UUID] = set()
        self._created: dict[UUID, int] = {}
        # A test may set this to raise inside a write, between two of its parts.
        self.fail_after_order_write: Exception | None = None

    async def create(self, change: Change) -> None:
        if change.order is None:
            raise ValueError("create needs an order")
        async with self._lock:
            if change.idempotency is not None:
                idem = change.idempotency
                if (idem.user_id, idem.scope, idem.key) in self.idempotency:
                    raise DuplicateIdempotencyKey("idempotency key already used")
            self._apply(OrderAggregate(order=change.order), change)

    async def update(
        self, order_id: UUID, decide: Callable[[OrderAggregate], tuple[Change, T]]
    ) -> T:
        async with self._lock:
            aggregate = self.aggregates.get(order_id)
            if aggregate is None:
                raise NotFound(f"order {order_id} not found")
            change, value = decide(aggregate)
            if change.idempotency is not None:
                idem = change.idempotency
                if (idem.user_id, idem.scope, idem.key) in self.idempotency:
                    raise DuplicateIdempotencyKey("idempotency key already used")
            if change.processed_event_id in self.processed_events:
                return value
            if change.guard is not None and not aggregate.holds(change.guard):
                if change.on_reject is not None:
                    self.audit_log.append(change.on_reject)
                return value
            if not change.is_empty:
                self._apply(aggregate, change)
            return value

    def _apply(self, aggregate: OrderAggregate, change: Change) -> None:
        order_id = aggregate.order.order_id
        if change.order is not None and self.fail_after_order_write is not None:
            raise self.fail_after_order_write
        self._put_aggregate(aggregate.with_change(change))
        self.history_log.setdefault(order_id, []).extend(change.history)
        self.audit_log.extend(change.audit)
        for event in change.events:
            if event.event_id not in self._event_ids:
                stored = attrs.evolve(event, seq=len(self.outbox) + 1)
                self.outbox.append(stored)
                self._event_ids.add(event.event_id)
                self._unpublished[len(self.outbox)] = stored
        if change.idempotency is not None:
            idem = change.idempotency
            self.idempotency[(idem.user_id, idem.scope, idem.key)] = idem
        if change.processed_event_id is not None:
            self.processed_events.add(change.processed_event_id)
        self.committed.append(change)

    async def load(self, order_id: UUID) -> OrderAggregate | None:
        return self.aggregates.get(order_id)

    async def load_with_history(
        self, order_id: UUID
    ) -> tuple[OrderAggregate, list[HistoryEntry]] | None:
        # Both read without yielding to the event loop, so no write lands in between.
        aggregate = self.aggregates.get(order_id)
        if aggregate is None:
            return None
        return aggregate, list(self.history_log.get(order_id, []))

    async def history(self, order_id: UUID) -> list[HistoryEntry]:
        return list(self.history_log.get(order_id, []))

    async def audit_entries(self, order_id: UUID) -> list[AuditEntry]:
        return [a for a in self.audit_log if a.order_id == order_id]

    async def find_idempotency(self, user_id: str, scope: str, key: str) -> ApiIdempotency | None:
        return self.idempotency.get((user_id, scope, key))

    async def list_orders(
        self,
        *,
        customer_id: str | None,
        state: OrderState | None,
        limit: int,
        before: tuple[datetime, UUID] | None,
    ) -> list[Order]:
        orders = sorted(
            (a.order for a in self.aggregates.values()),
            key=lambda o: (o.created_at, o.order_id),
            reverse=True,
        )
        return [
            o
            for o in orders
            if (customer_id is None or o.customer_id == customer_id)
            and (state is None or o.state is state)
            and (before is None or (o.created_at, o.order_id) < before)
        ][:limit]

    async def list_waiting(
        self,
        *,
        customer_id: str | None,
        state: OrderState | None,
        limit: int,
        before: tuple[datetime, UUID] | None,
    ) -> list[Order]:
        waiting = sorted(
            (
                (o.attention_since, o.order_id, o)
                for o in (a.order for a in self.aggregates.values())
                if o.attention_reason is not None and o.attention_since is not None
            ),
            key=lambda t: (t[0], t[1]),
            reverse=True,
        )
        return [
            o
            for since, order_id, o in waiting
            if (customer_id is None or o.customer_id == customer_id)
            and (state is None or o.state is state)
            and (before is None or (since, order_id) < before)
        ][:limit]

    async def count_orders(self) -> list[OrderCount]:
        counted = Counter(
            (a.order.state, a.order.attention_reason) for a in self.aggregates.values()
        )
        return [OrderCount(state, reason, n) for (state, reason), n in counted.items()]

    async def claim_due(
        self, *, owner: str, now: datetime, limit: int, lease_s: float
    ) -> list[Claim]:
        async with self._lock:
            due = sorted(
                (
                    s
                    for order_id in self._live
                    for s in self.aggregates[order_id].steps
                    if _is_claimable(s, now)
                ),
                key=lambda s: (s.next_attempt_at or now, s.seq, self._created[s.order_id]),
            )[:limit]
            claims = []
            for step in due:
                expires = now + timedelta(seconds=lease_s)
                claimed = attrs.evolve(
                    step,
                    status=StepStatus.RUNNING,
                    attempt=step.attempt + 1,
                    lease_owner=owner,
                    lease_expires_at=expires,
                )
                self._put_step(claimed)
                claims.append(
                    Claim(step.step_id, step.order_id, step.kind, claimed.attempt, owner, expires)
                )
            return claims

    def _put_step(self, step: Step) -> None:
        aggregate = self.aggregates[step.order_id]
        self._put_aggregate(aggregate.with_change(Change(steps=(step,))))

    def _put_aggregate(self, aggregate: OrderAggregate) -> None:
        order_id = aggregate.order.order_id
        self._created.setdefault(order_id, len(self._created))
        self.aggregates[order_id] = aggregate
        if any(s.is_due_or_running for s in aggregate.steps):
            self._live.add(order_id)
        else:
            self._live.discard(order_id)

    async def renew_lease(self, claim: Claim, *, now: datetime, lease_s: float) -> bool:
        async with self._lock:
            aggregate = self.aggregates.get(claim.order_id)
            step = aggregate.step(claim.step_id) if aggregate else None
            if (
                step is None
                or step.status is not StepStatus.RUNNING
                or step.attempt != claim.attempt
                or step.lease_owner != claim.owner
                or step.lease_expires_at is None
                or step.lease_expires_at <= now
            ):
                return False
            self._put_step(attrs.evolve(step, lease_expires_at=now + timedelta(seconds=lease_s)))
            return True

    async def events(self, *, after: int, limit: int) -> list[OutboxEvent]:
        return [e for e in self.feed if e.seq > after][:limit]

    async def unpublished_events(self, limit: int) -> list[OutboxEvent]:
        return list(itertools.islice(self._unpublished.values(), limit))

    async def mark_published(self, seqs: list[int], now: datetime) -> None:
        del now
        async with self._lock:
            for seq in sorted(set(seqs)):  # in outbox order, each once
                event = self._unpublished.pop(seq, None)
                if event is not None:
                    self.feed.append(attrs.evolve(event, seq=len(self.feed) + 1))


def _is_claimable(step: Step, now: datetime) -> bool:
    if step.status in DUE_STATUSES:
        return step.next_attempt_at is not None and step.next_attempt_at <= now
    return (
        step.status is StepStatus.RUNNING
        and step.lease_expires_at is not None
        and step.lease_expires_at <= now
    )


class InMemoryUsers:
    """Token hashes to principals, for embedding and tests."""

    def __init__(self, users: dict[str, Principal] | None = None) -> None:
        self.by_hash: dict[str, Principal] = dict(users or {})

    async def principal_for_token_hash(self, token_hash: str) -> Principal | None:
        return self.by_hash.get(token_hash)
