"""The outbox relay publishes committed events to the feed, at least once, in publication order,
and holds them back with growing delays while the sink fails."""

from __future__ import annotations

from orderflow_core import OutboxEvent, Succeeded, Transient
from orderflow_core.outcomes import Outcome
from orderflow_core.relay import OutboxRelay
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
