"""A store wrapper that records who wrote what: every applied change with the generation
(step, attempt, owner) it was committed under and the attempt records it wrote.

Rule 6 is about writers, not values: a stale owner must write nothing once its lease is lost,
while a later writer (a reconciliation proving that the stale attempt charged nothing) may
legitimately rewrite that attempt's record. Reading the stored attempt alone cannot tell the two
apart; this log can. It wraps any `OrderStore` and learns from the store's own answers whether a
change was applied: `update` applies the change `decide` returned when its guard held on the
aggregate `decide` was given and the call returned (a fenced-off change raises instead).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

import attrs

from orderflow_core.model import (
    ApiIdempotency,
    AuditEntry,
    Change,
    Claim,
    Guard,
    HistoryEntry,
    Order,
    OrderAggregate,
    OutboxEvent,
)
from orderflow_core.ports import ClaimsWithStarts, GroupCommits, OrderCount, OrderStore
from orderflow_core.states import OrderState

T = TypeVar("T")


@attrs.frozen
class Write:
    """One applied change: the generation it was committed under (None for a command or a
    creation) and the attempt records, as (step id, attempt number), it added or changed."""

    order_id: UUID
    guard: Guard | None
    attempts: tuple[tuple[UUID, int], ...]


def written_attempts(before: OrderAggregate, change: Change) -> tuple[tuple[UUID, int], ...]:
    """The attempt records `change` adds or alters, compared with the aggregate it came from."""
    written: list[tuple[UUID, int]] = []
    for step in change.steps:
        old = before.step(step.step_id)
        previous = {a.attempt: a for a in old.attempts} if old is not None else {}
        written.extend(
            (step.step_id, a.attempt) for a in step.attempts if previous.get(a.attempt) != a
        )
    return tuple(written)


def _applied(before: OrderAggregate, change: Change) -> bool:
    guard_held = change.guard is None or before.holds(change.guard)
    return guard_held and not change.is_empty and not _only_a_rejection(change)


def _only_a_rejection(change: Change) -> bool:
    """A result whose lease ran out is not stored; its rejection is audited, and that audit
    entry is the change's only part. It records that the owner was refused, not a write."""
    stored = change.order or change.steps or change.refunds or change.history or change.events
    return not stored and all(a.action == "step.result_rejected" for a in change.audit)


class RecordingStore:
    """An `OrderStore` (and outbox feed, when the wrapped store is one) that logs each applied
    change in `writes`, in commit order."""

    def __init__(self, inner: OrderStore) -> None:
        self.inner = inner
        self.writes: list[Write] = []

    def _record(self, order_id: UUID, before: OrderAggregate, change: Change) -> None:
        if _applied(before, change):
            self.writes.append(Write(order_id, change.guard, written_attempts(before, change)))

    def writes_under(self, guard: Guard, since: int = 0) -> list[Write]:
        """Applied changes committed under `guard`, from position `since` of the log on."""
        return [w for w in self.writes[since:] if w.guard == guard]

    async def create(self, change: Change) -> None:
        await self.inner.create(change)
        if change.order is not None:
            empty = OrderAggregate(order=change.order)
            self.writes.append(Write(change.order.order_id, None, written_attempts(empty, change)))

    async def update(
        self, order_id: UUID, decide: Callable[[OrderAggregate], tuple[Change, T]]
    ) -> T:
        seen: list[tuple[OrderAggregate, Change]] = []

        def watched(aggregate: OrderAggregate) -> tuple[Change, T]:
            change, value = decide(aggregate)
            seen.append((aggregate, change))  # a store may call decide again on a retry
            return change, value

        value = await self.inner.update(order_id, watched)
        if seen:
            self._record(order_id, *seen[-1])
        return value

    async def load(self, order_id: UUID) -> OrderAggregate | None:
        return await self.inner.load(order_id)

    async def load_with_history(
        self, order_id: UUID
    ) -> tuple[OrderAggregate, list[HistoryEntry]] | None:
        return await self.inner.load_with_history(order_id)

    async def list_waiting(
        self,
        *,
        customer_id: str | None,
        state: OrderState | None,
        limit: int,
        before: tuple[datetime, UUID] | None,
    ) -> list[Order]:
        return await self.inner.list_waiting(
            customer_id=customer_id, state=state, limit=limit, before=before
        )

    async def count_orders(self) -> list[OrderCount]:
        return await self.inner.count_orders()

    async def history(self, order_id: UUID) -> list[HistoryEntry]:
        return await self.inner.history(order_id)

    async def audit_entries(self, order_id: UUID) -> list[AuditEntry]:
        return await self.inner.audit_entries(order_id)

    async def find_idempotency(self, user_id: str, scope: str, key: str) -> ApiIdempotency | None:
        return await self.inner.find_idempotency(user_id, scope, key)

    async def list_orders(
        self,
        *,
        customer_id: str | None,
        state: OrderState | None,
        limit: int,
        before: tuple[datetime, UUID] | None,
    ) -> list[Order]:
        return await self.inner.list_orders(
            customer_id=customer_id, state=state, limit=limit, before=before
        )

    async def claim_due(
        self, *, owner: str, now: datetime, limit: int, lease_s: float
    ) -> list[Claim]:
        return await self.inner.claim_due(owner=owner, now=now, limit=limit, lease_s=lease_s)

    async def renew_lease(self, claim: Claim, *, now: datetime, lease_s: float) -> bool:
        return await self.inner.renew_lease(claim, now=now, lease_s=lease_s)

    async def events(self, *, after: int, limit: int) -> list[OutboxEvent]:
        return await self.inner.events(after=after, limit=limit)

    # The outbox feed side (`OutboxFeed`), which both shipped stores also are.
    async def unpublished_events(self, limit: int) -> list[OutboxEvent]:
        feed: Any = self.inner
        events: list[OutboxEvent] = await feed.unpublished_events(limit)
        return events

    async def mark_published(self, seqs: list[int], now: datetime) -> None:
        feed: Any = self.inner
        await feed.mark_published(seqs, now)


class BatchedRecordingStore(RecordingStore):
    """A `RecordingStore` around a store that offers `GroupCommits` and `ClaimsWithStarts`: it
    offers them too, recording what each batch committed."""

    def __init__(self, inner: OrderStore) -> None:
        super().__init__(inner)
        assert isinstance(inner, GroupCommits)
        assert isinstance(inner, ClaimsWithStarts)
        self.batched = inner
        self.claims_with_starts: ClaimsWithStarts = inner

    async def update_many(
        self, updates: Sequence[tuple[UUID, Callable[[OrderAggregate], tuple[Change, T]]]]
    ) -> list[T | Exception]:
        seen: dict[int, tuple[OrderAggregate, Change]] = {}

        def watching(
            index: int, decide: Callable[[OrderAggregate], tuple[Change, T]]
        ) -> Callable[[OrderAggregate], tuple[Change, T]]:
            def watched(aggregate: OrderAggregate) -> tuple[Change, T]:
                change, value = decide(aggregate)
                seen[index] = (aggregate, change)  # the last call is the one committed
                return change, value

            return watched

        results = await self.batched.update_many(
            [(order_id, watching(i, decide)) for i, (order_id, decide) in enumerate(updates)]
        )
        for i, ((order_id, _), result) in enumerate(zip(updates, results, strict=True)):
            if not isinstance(result, Exception) and i in seen:
                self._record(order_id, *seen[i])
        return results

    async def claim_and_start(
        self,
        *,
        owner: str,
        now: datetime,
        limit: int,
        lease_s: float,
        start: Callable[[Claim, OrderAggregate], tuple[Change, T]],
    ) -> list[tuple[Claim, T | Exception]]:
        seen: dict[UUID, tuple[OrderAggregate, Change]] = {}

        def watched(claim: Claim, aggregate: OrderAggregate) -> tuple[Change, T]:
            change, value = start(claim, aggregate)
            seen[claim.step_id] = (aggregate, change)  # the last call is the one committed
            return change, value

        started = await self.claims_with_starts.claim_and_start(
            owner=owner, now=now, limit=limit, lease_s=lease_s, start=watched
        )
        for claim, result in started:
            if not isinstance(result, Exception) and claim.step_id in seen:
                self._record(claim.order_id, *seen[claim.step_id])
        return started


def recording_store(inner: OrderStore) -> RecordingStore:
    """A recorder around `inner` that offers what `inner` offers (the contract alone, or the
    batched writes too), so the executor takes the same path through both."""
    if isinstance(inner, GroupCommits) and isinstance(inner, ClaimsWithStarts):
        return BatchedRecordingStore(inner)
    return RecordingStore(inner)
