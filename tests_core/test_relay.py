"""The outbox relay publishes committed events to the feed, at least once, in publication order,
and holds them back with growing delays while the sink fails."""

from __future__ import annotations

import logging
from datetime import datetime

import pytest

from orderflow_core import OutboxEvent, RetryPolicy, Succeeded, Transient
from orderflow_core.errors import StoreUnavailable
from orderflow_core.outcomes import Outcome, UnknownOutcome
from orderflow_core.relay import AllSinks, OutboxFeed, OutboxRelay, worst_redelivery_delay_s
from tests_core.world import World


class RecordingSink:
    """Answers from a script (then success) and records every delivery it saw."""

    def __init__(self, *answers: Outcome) -> None:
        self.answers = list(answers)
        self.seen: list[OutboxEvent] = []

    async def __call__(self, event: OutboxEvent) -> Outcome:
        self.seen.append(event)
        return self.answers.pop(0) if self.answers else Succeeded({})


def test_committed_events_reach_the_feed_only_through_the_relay() -> None:
    w = World()
    try:
        w.create()
        w.settle()
        assert w.run(w.store.events(after=0, limit=100)) == []
        published = w.publish()
        feed = w.run(w.store.events(after=0, limit=100))
        assert published == len(feed) > 0
        assert [e.seq for e in feed] == list(range(1, len(feed) + 1))
        assert feed[0].type == "order.created"
        assert w.publish() == 0
    finally:
        w.close()


def test_a_failing_sink_holds_events_back_and_retries_with_growing_delays() -> None:
    w = World()
    sink = RecordingSink(Transient("503"), Transient("503", retry_after_s=7.0))
    relay = OutboxRelay(w.store, w.clock, sink=sink)  # type: ignore[arg-type]
    try:
        w.create()
        assert w.run(relay.run_once()) == 0
        assert w.run(relay.run_once()) == 0, "resting after the first failure"
        assert len(sink.seen) == 1
        w.clock.advance(1.0)  # the first retry delay
        assert w.run(relay.run_once()) == 0
        assert len(sink.seen) == 2
        w.clock.advance(13.9)  # the hint, doubled for the second failure, is 14 s
        assert w.run(relay.run_once()) == 0
        assert len(sink.seen) == 2
        w.clock.advance(0.1)
        assert w.run(relay.run_once()) == 1
        assert {e.event_id for e in sink.seen} == {sink.seen[0].event_id}
        assert len(w.run(w.store.events(after=0, limit=10))) == 1
    finally:
        w.close()


def test_events_delivered_before_a_failure_are_published_and_not_sent_again() -> None:
    w = World()
    w.create()
    w.create()
    sink = RecordingSink(Succeeded({}), Transient("down"))
    relay = OutboxRelay(w.store, w.clock, sink=sink)  # type: ignore[arg-type]
    try:
        assert w.run(relay.run_once()) == 1
        w.clock.advance(1.0)
        assert w.run(relay.run_once()) == 1
        assert len(sink.seen) == 3
        assert len({e.event_id for e in sink.seen}) == 2
    finally:
        w.close()


class FlakyFeed:
    """The store's outbox, whose `mark_published` fails the first `failures` times."""

    def __init__(self, feed: OutboxFeed, failures: int) -> None:
        self.feed = feed
        self.failures = failures

    async def unpublished_events(self, limit: int) -> list[OutboxEvent]:
        return await self.feed.unpublished_events(limit)

    async def mark_published(self, seqs: list[int], now: datetime) -> None:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("database down")
        await self.feed.mark_published(seqs, now)


def test_a_sink_outage_is_logged_once_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    w = World()
    sink = RecordingSink(*[Transient("NATS unavailable")] * 6)
    relay = OutboxRelay(w.store, w.clock, sink=sink)  # type: ignore[arg-type]
    try:
        w.create()
        with caplog.at_level(logging.DEBUG, logger="orderflow.relay"):
            for _ in range(8):
                w.run(relay.run_once())
                assert relay.failing == (len(sink.seen) <= 6)
                w.clock.advance(60.0)  # past the capped backoff
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        infos = [r for r in caplog.records if r.levelno == logging.INFO]
        assert len(sink.seen) == 7
        assert len(warnings) == 1
        assert "NATS unavailable" in warnings[0].getMessage()
        assert len(infos) == 1
        assert "delivered again after 6 failed attempts" in infos[0].getMessage()
        assert not any(r.exc_info for r in caplog.records)
    finally:
        w.close()


def test_events_handed_on_but_not_marked_are_marked_later_without_handing_them_on_again() -> None:
    w = World()
    sink = RecordingSink()
    relay = OutboxRelay(FlakyFeed(w.store, failures=1), w.clock, sink=sink)  # type: ignore[arg-type]
    try:
        w.create()
        w.create()
        with pytest.raises(StoreUnavailable):
            w.run(relay.run_once())
        assert len(sink.seen) == 2
        assert w.run(w.store.events(after=0, limit=10)) == []
        assert w.run(relay.run_once()) == 2
        assert len(sink.seen) == 2, "the sink already took both events"
        assert len(w.run(w.store.events(after=0, limit=10))) == 2
        w.create()
        assert w.run(relay.run_once()) == 1
        assert len({e.event_id for e in sink.seen}) == len(sink.seen) == 3
    finally:
        w.close()


def test_a_relay_forgets_what_another_relay_marked() -> None:
    w = World()
    sink = RecordingSink()
    mine = OutboxRelay(FlakyFeed(w.store, failures=1), w.clock, sink=sink)  # type: ignore[arg-type]
    other = OutboxRelay(w.store, w.clock, sink=RecordingSink())  # type: ignore[arg-type]
    try:
        w.create()
        with pytest.raises(StoreUnavailable):
            w.run(mine.run_once())
        assert w.run(other.run_once()) == 1
        assert w.run(mine.run_once()) == 0
        assert mine._handed_on == set()
    finally:
        w.close()


def test_a_slow_sink_ends_a_batch_after_its_time_budget_so_it_never_works_from_a_stale_read() -> (
    None
):
    w = World()

    class SlowSink(RecordingSink):
        async def __call__(self, event: OutboxEvent) -> Outcome:
            w.clock.advance(2.0)  # each delivery takes 2 s
            return await super().__call__(event)

    sink = SlowSink()
    relay = OutboxRelay(w.store, w.clock, sink=sink, batch_s=5.0)  # type: ignore[arg-type]
    try:
        for _ in range(5):
            w.create()
        assert w.run(relay.run_once()) == 3, "2 s, 4 s, then the third starts before 5 s"
        assert w.run(relay.run_once()) == 2
        assert len(sink.seen) == 5
    finally:
        w.close()


def test_all_sinks_must_take_an_event_and_a_refusal_retries_it_on_every_sink() -> None:
    w = World()
    first, second = RecordingSink(), RecordingSink(UnknownOutcome("no ack"))
    relay = OutboxRelay(w.store, w.clock, sink=AllSinks(first, second))
    try:
        w.create()
        assert w.run(relay.run_once()) == 0
        w.clock.advance(1.0)
        assert w.run(relay.run_once()) == 1
        assert len(first.seen) == len(second.seen) == 2
        assert w.run(w.store.events(after=0, limit=10))[0].event_id == first.seen[0].event_id
    finally:
        w.close()


def test_the_worst_redelivery_delay_covers_the_backoff_cap_or_a_batch_plus_one_delivery() -> None:
    retry = RetryPolicy(retry_after_cap_s=60.0)
    assert worst_redelivery_delay_s(retry, 0.5, 3.0, 5.0) == 63.5
    assert worst_redelivery_delay_s(retry, 0.5, 3.0, 90.0) == 93.5
