"""The outbox relay: hands committed events on, at least once, and publishes them to the feed.

An event enters the feed (`GET /api/v1/events`) when the relay marks it published; the store
numbers the feed in publication order, so a consumer reading `after=N` never misses an event
that committed late (outbox sequence numbers are handed out before commit, in no safe order).

Sinks (a webhook, a broker) get every event before it is marked, oldest first; a failing sink
holds back that event and everything after it, so the events of one order are handed on in
their order and none is skipped. The relay is broker-agnostic: it only sees `EventSink`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from datetime import datetime, timedelta
from typing import Protocol

from orderflow_core.attention import log_published
from orderflow_core.model import OutboxEvent
from orderflow_core.observe import NULL_OBSERVER, Observer
from orderflow_core.outcomes import Outcome, Succeeded, Transient
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


class AllSinks:
    """Hand each event to every sink in turn; it is delivered once all of them took it.

    A sink that fails makes the relay retry the event on all of them later: sinks are
    at-least-once and their consumers (or the broker) de-duplicate by `event_id`.
    """

    def __init__(self, *sinks: EventSink) -> None:
        self._sinks = sinks

    async def __call__(self, event: OutboxEvent) -> Outcome:
        outcome: Outcome = Succeeded({})
        for sink in self._sinks:
            outcome = await sink(event)
            if not isinstance(outcome, Succeeded):
                return outcome
        return outcome


def worst_redelivery_delay_s(
    retry: RetryPolicy, poll_interval_s: float, delivery_timeout_s: float, batch_s: float
) -> float:
    """The longest a running relay may take to hand an already delivered event on again.

    That happens when a delivery's answer is lost (the relay waits at most the capped backoff,
    then the delivery timeout) or when another relay read the event before it was marked (it
    spends at most `batch_s` on one batch, plus one delivery, plus one poll interval). A relay
    that crashes between delivering and marking re-delivers when it (or another) runs again.
    """
    return max(retry.retry_after_cap_s, batch_s) + delivery_timeout_s + poll_interval_s


class OutboxRelay:
    """Moves events from the outbox to the feed and the optional sink, with backoff on failure.

    Events the sink took but that could not be marked yet (the store failed) are remembered
    and marked on the next run without being handed on again. A batch stops after `batch_s`
    so that a slow sink cannot hold a stale batch for long (see `worst_redelivery_delay_s`).
    """

    def __init__(
        self,
        feed: OutboxFeed,
        clock: Clock,
        *,
        sink: EventSink | None = None,
        retry: RetryPolicy | None = None,
        batch: int = 500,
        batch_s: float = 5.0,
        observer: Observer = NULL_OBSERVER,
    ) -> None:
        self._feed = feed
        self._clock = clock
        self._sink = sink
        self._retry = retry or RetryPolicy()
        self._batch = batch
        self._batch_s = batch_s
        self._observer = observer
        self._failures = 0
        self._failing_since: datetime | None = None
        self._resume_at: datetime | None = None
        self._handed_on: set[int] = set()  # delivered to the sink, not yet marked

    async def run_once(self) -> int:
        """Publish one batch; returns how many events were published."""
        now = self._clock.now()
        if self._resume_at is not None and now < self._resume_at:
            return 0
        events = await self._feed.unpublished_events(self._batch)
        self._forget_marked_elsewhere(events)
        delivered: list[int] = []
        for event in events:
            if self._sink is not None and event.seq not in self._handed_on:
                if (self._clock.now() - now).total_seconds() >= self._batch_s:
                    break  # hand the rest on from a fresh read, not from this stale batch
                if not await self._deliver(event):
                    break
                self._handed_on.add(event.seq)
            delivered.append(event.seq)
        await self._feed.mark_published(delivered, self._clock.now())
        log_published(events[: len(delivered)])
        self._handed_on.difference_update(delivered)
        if delivered:
            self._observer.events_published(len(delivered))
        return len(delivered)

    def _forget_marked_elsewhere(self, events: list[OutboxEvent]) -> None:
        """Events are read oldest first: a remembered one that a read passed over is marked."""
        if not self._handed_on:
            return
        read = {event.seq for event in events}
        top = events[-1].seq if len(events) == self._batch else None
        self._handed_on = {
            seq for seq in self._handed_on if seq in read or (top is not None and seq > top)
        }

    async def _deliver(self, event: OutboxEvent) -> bool:
        assert self._sink is not None
        outcome = await self._sink(event)
        if isinstance(outcome, Succeeded):
            if self._failing_since is not None:
                down_s = (self._clock.now() - self._failing_since).total_seconds()
                log.info(
                    "events are delivered again after %d failed attempts over %.1f s",
                    self._failures,
                    down_s,
                )
            self._failures, self._resume_at, self._failing_since = 0, None, None
            return True
        self._failures += 1
        # The sink is retried for ever: an event is never dropped, only delayed. The delay
        # starts at the sink's Retry-After hint (or the first retry delay) and doubles.
        hint = outcome.retry_after_s if isinstance(outcome, Transient) else None
        base = hint if hint is not None else self._retry.delays_s[0]
        delay = min(base * 2 ** min(self._failures - 1, 6), self._retry.retry_after_cap_s)
        self._resume_at = self._clock.now() + timedelta(seconds=delay)
        if self._failing_since is None:  # once per outage; the recovery is logged too
            self._failing_since = self._clock.now()
            log.warning(
                "event %s not delivered (%s); holding events back and retrying with backoff "
                "(at most %.0f s apart) until it is",
                event.event_id,
                _describe(outcome),
                self._retry.retry_after_cap_s,
                extra={"order_id": str(event.order_id)},
            )
        else:
            log.debug("event %s still not delivered (%s)", event.event_id, _describe(outcome))
        return False

    @property
    def failing(self) -> bool:
        """Whether the sink is failing (events are held back)."""
        return self._failing_since is not None


def _describe(outcome: Outcome) -> str:
    detail = getattr(outcome, "detail", None)
    return str(detail) if detail else type(outcome).__name__
