"""The outbox relay: hands committed events on, at least once, and publishes them to the feed.

An event enters the feed (`GET /api/v1/events`) when the relay marks it published; the store
numbers the feed in publication order, so a consumer reading `after=N` never misses an event
that committed late (outbox sequence numbers are handed out before commit, in no safe order).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from datetime import datetime, timedelta
from typing import Protocol

from orderflow_core.attention import log_published
from orderflow_core.model import OutboxEvent
from orderflow_core.observe import NULL_OBSERVER, Observer
from orderflow_core.outcomes import Outcome, Succeeded, Transient, outcome_name
from orderflow_core.ports import Clock
from orderflow_core.retry import RetryPolicy

log = logging.getLogger("orderflow.relay")


class OutboxFeed(Protocol):
    """The part of the store the relay needs."""

    async def unpublished_events(self, limit: int) -> list[OutboxEvent]:
        """Committed events not yet published, oldest first."""
        ...

    async def mark_published(self, seqs: list[int], now: datetime) -> None:
        """Publish these events to the feed, in one step, numbered after everything before."""
        ...


class EventSink(Protocol):
    """Where events go besides the feed (a webhook); consumers de-duplicate by event_id."""

    def __call__(self, event: OutboxEvent) -> Awaitable[Outcome]: ...


class OutboxRelay:
    """Moves events from the outbox to the feed and the optional sink, with backoff on failure."""

    def __init__(
        self,
        feed: OutboxFeed,
        clock: Clock,
        *,
        sink: EventSink | None = None,
        retry: RetryPolicy | None = None,
        batch: int = 500,
        observer: Observer = NULL_OBSERVER,
    ) -> None:
        self._feed = feed
        self._clock = clock
        self._sink = sink
        self._retry = retry or RetryPolicy()
        self._batch = batch
        self._observer = observer
        self._failures = 0
        self._resume_at: datetime | None = None

    async def run_once(self) -> int:
        """Publish one batch; returns how many events were published."""
        now = self._clock.now()
        if self._resume_at is not None and now < self._resume_at:
            return 0
        events = await self._feed.unpublished_events(self._batch)
        delivered: list[int] = []
        for event in events:
            if self._sink is not None and not await self._deliver(event):
                break
            delivered.append(event.seq)
        await self._feed.mark_published(delivered, self._clock.now())
        log_published(events[: len(delivered)])
        if delivered:
            self._observer.events_published(len(delivered))
        return len(delivered)

    async def _deliver(self, event: OutboxEvent) -> bool:
        assert self._sink is not None
        outcome = await self._sink(event)
        if isinstance(outcome, Succeeded):
            self._failures, self._resume_at = 0, None
            return True
        self._failures += 1
        # The sink is retried for ever: an event is never dropped, only delayed. The delay
        # starts at the sink's Retry-After hint (or the first retry delay) and doubles.
        hint = outcome.retry_after_s if isinstance(outcome, Transient) else None
        base = hint if hint is not None else self._retry.delays_s[0]
        delay = min(base * 2 ** min(self._failures - 1, 6), self._retry.retry_after_cap_s)
        self._resume_at = self._clock.now() + timedelta(seconds=delay)
        reason = outcome_name(outcome) + (f": {outcome.detail}" if outcome.detail else "")
        log.warning(
            "event %s not delivered (%s); retrying in %.1f s",
            event.event_id,
            reason,
            delay,
            extra={"order_id": str(event.order_id)},
        )
        return False
