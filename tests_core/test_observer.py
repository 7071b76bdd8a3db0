"""The executor and the relay report to the observer port at clear points: each claim with its
size, each attempt with its outcome and the order's creating trace, a takeover after a lease ran
out, a stale result that was not committed, each batch of published events."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from orderflow_core import StepKind
from orderflow_core.model import Claim
from orderflow_core.observe import AttemptObservation, request_trace_parent
from orderflow_core.relay import OutboxFeed, OutboxRelay
from tests_core.world import World

TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class _Attempt:
    def __init__(self) -> None:
        self.outcome: str | None = None

    def finished(self, outcome: str) -> None:
        self.outcome = outcome


class Recording:
    """An observer that keeps every report."""

    def __init__(self) -> None:
        self.claims: list[int] = []
        self.takeovers: list[tuple[str, int]] = []
        self.stale: list[tuple[str, int, str]] = []
        self.attempts: list[tuple[str, str, str | None, str | None]] = []
        self.published: list[int] = []
        self.batches: list[int] = []

    def claimed(self, count: int) -> None:
        self.claims.append(count)

    def lease_taken_over(self, claim: Claim) -> None:
        self.takeovers.append((claim.kind.value, claim.attempt))

    def stale_result_rejected(self, claim: Claim) -> None:
        self.stale.append((claim.kind.value, claim.attempt, claim.owner))

    @contextmanager
    def step_attempt(
        self, claim: Claim, worker: str, trace_parent: str | None
    ) -> Iterator[AttemptObservation]:
        seen = _Attempt()
        try:
            yield seen
        finally:
            self.attempts.append((claim.kind.value, worker, trace_parent, seen.outcome))

    def commit_batch(self, size: int) -> None:
        self.batches.append(size)

    def events_published(self, count: int) -> None:
        self.published.append(count)


def _observed_world(executors: int = 1, **kwargs: Any) -> tuple[World, Recording]:
    kwargs.setdefault("process_version", 1)  # the counts below: reserve, charge, ship
    world = World(executors=executors, **kwargs)
    seen = Recording()
    for executor in world.executors:
        executor.observer = seen
    feed: OutboxFeed = world.store  # type: ignore[assignment]
    world.relay = OutboxRelay(feed, world.clock, observer=seen)
    return world, seen


def test_every_attempt_is_reported_with_its_kind_outcome_and_worker() -> None:
    world, seen = _observed_world()
    try:
        orders = [world.create() for _ in range(3)]
        world.settle()
        assert {world.state(o).value for o in orders} == {"shipped"}
        kinds = Counter((kind, outcome) for kind, _, _, outcome in seen.attempts)
        assert kinds == Counter(
            {("reserve", "succeeded"): 3, ("charge", "succeeded"): 3, ("ship", "succeeded"): 3}
        )
        assert {worker for _, worker, _, _ in seen.attempts} == {"worker-0"}
        # Every step ran through a claim; every claim statement is reported, empty ones too.
        assert sum(seen.claims) == 9
        assert 0 in seen.claims
        assert seen.takeovers == []
        assert seen.stale == []
        published = world.publish()
        assert published > 0
        assert sum(seen.published) == published
        assert 0 not in seen.published  # an empty relay round reports nothing
    finally:
        world.close()


def test_the_creating_requests_trace_is_handed_to_every_attempt_of_the_order() -> None:
    world, seen = _observed_world(executors=2)
    try:
        token = request_trace_parent.set(TRACE)
        try:
            traced = world.create()
        finally:
            request_trace_parent.reset(token)
        untraced = world.create()
        assert world.load(traced).order.trace_parent == TRACE
        assert world.load(untraced).order.trace_parent is None
        # The chaining executor (1) runs each order's charge and ship right after its reserve.
        while world.step(1):
            pass
        assert {world.state(o).value for o in (traced, untraced)} == {"shipped"}
        parents = Counter(parent for _, _, parent, _ in seen.attempts)
        assert parents == Counter({TRACE: 3, None: 3})
        assert {worker for _, worker, _, _ in seen.attempts} == {"worker-1"}
    finally:
        world.close()


def test_a_takeover_and_the_stale_result_it_fences_off_are_reported() -> None:
    gate = asyncio.Event()
    reached = asyncio.Event()

    async def stall_first_reserve(name: str, claim: Claim) -> None:
        if name == "after_call" and claim.owner == "worker-0" and claim.kind is StepKind.RESERVE:
            reached.set()
            await gate.wait()

    world, seen = _observed_world(executors=2, checkpoint=stall_first_reserve)
    try:
        order_id = world.create()

        async def scenario() -> None:
            first = asyncio.create_task(world.executors[0].run_once())
            await reached.wait()
            world.clock.advance(world.timing.lease_s + 1)
            assert await world.executors[1].run_once() == 1  # takes the reserve over
            gate.set()
            await first

        world.run(scenario())
        assert world.state(order_id).value == "shipped"
        assert seen.takeovers == [("reserve", 2)]
        assert seen.stale == [("reserve", 1, "worker-0")]
        outcomes = sorted((kind, worker, outcome) for kind, worker, _, outcome in seen.attempts)
        assert outcomes == [
            ("charge", "worker-1", "succeeded"),
            ("reserve", "worker-0", "succeeded"),
            ("reserve", "worker-1", "succeeded"),
            ("ship", "worker-1", "succeeded"),
        ]
    finally:
        world.close()
