"""The executor's decisions (a claim's start, an attempt's result) change nothing themselves: a
store may call one twice (decide on a fresh read, retry a write), and what the executor does
with a decision (observe a takeover, hand a trace on, give a slot back) happens once, after the
store returned it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar
from uuid import UUID

from orderflow_core import StepKind
from orderflow_core.executor import Executor
from orderflow_core.model import Change, Claim, OrderAggregate
from orderflow_core.ports import ClaimsWithStarts, GroupCommits
from orderflow_core.testing import InMemoryOrderStore
from tests_core.batching import BatchingMemoryStore
from tests_core.test_observer import Recording
from tests_core.world import World

T = TypeVar("T")


def _executor_state(executor: Executor, seen: Recording) -> tuple[Any, ...]:
    """Everything of the executor (and its observer) a decision could touch."""
    return (
        executor.free_slots,
        dict(executor._facts),
        frozenset(executor._in_flight),
        frozenset(executor._finishing),
        list(seen.claims),
        list(seen.takeovers),
        list(seen.stale),
        list(seen.attempts),
    )


class DecidesTwice(InMemoryOrderStore):
    """A store that decides every update twice: once on its own (the value thrown away, as a
    store does that decides again after a retry), then for real. It notes every executor state
    that the thrown-away decision changed."""

    def __init__(self) -> None:
        super().__init__()
        self.watched: list[tuple[Executor, Recording]] = []
        self.changed_by_decide: list[str] = []
        self.decisions = 0

    async def update(
        self, order_id: UUID, decide: Callable[[OrderAggregate], tuple[Change, T]]
    ) -> T:
        aggregate = self.aggregates.get(order_id)
        if aggregate is not None:
            before = [_executor_state(e, seen) for e, seen in self.watched]
            decide(aggregate)
            self.decisions += 1
            after = [_executor_state(e, seen) for e, seen in self.watched]
            if before != after:
                self.changed_by_decide.append(f"{before} -> {after}")
        return await super().update(order_id, decide)


def _world(store: DecidesTwice, **kwargs: Any) -> tuple[World, Recording]:
    world = World(executors=2, store=store, process_version=1, **kwargs)
    seen = Recording()
    for executor in world.executors:
        executor.observer = seen
        store.watched.append((executor, seen))
    return world, seen


def test_a_decision_taken_twice_changes_nothing_and_is_acted_on_once() -> None:
    """A takeover, a stale result and a chain of steps, each decided twice by the store: the
    observer hears of each once, the chain goes on, no decision touched the executor."""
    gate = asyncio.Event()
    reached = asyncio.Event()

    async def stall_first_reserve(name: str, claim: Claim) -> None:
        if name == "after_call" and claim.owner == "worker-0" and claim.kind is StepKind.RESERVE:
            reached.set()
            await gate.wait()

    store = DecidesTwice()
    world, seen = _world(store, checkpoint=stall_first_reserve)
    try:
        order_id = world.create()

        async def scenario() -> None:
            first = asyncio.create_task(world.executors[0].run_once())
            await reached.wait()
            world.clock.advance(world.timing.lease_s + 1)
            # Worker 1 takes the reserve over and chains the charge and the ship after it.
            assert await world.executors[1].run_once() == 1
            gate.set()
            await first

        world.run(scenario())
        assert world.state(order_id).value == "shipped"
        assert store.decisions >= 5  # two starts, two reserve results, charge, ship
        assert store.changed_by_decide == []
        assert seen.takeovers == [("reserve", 2)]
        assert seen.stale == [("reserve", 1, "worker-0")]
        outcomes = sorted((kind, worker, outcome) for kind, worker, _, outcome in seen.attempts)
        assert outcomes == [
            ("charge", "worker-1", "succeeded"),
            ("reserve", "worker-0", "succeeded"),
            ("reserve", "worker-1", "succeeded"),
            ("ship", "worker-1", "succeeded"),
        ]
        # Every attempt ran under its own executor's slot, and gave it back.
        assert [e.free_slots for e in world.executors] == [world.timing.max_concurrent] * 2
    finally:
        world.close()


def test_a_start_decided_twice_leaves_the_executor_as_it_was() -> None:
    """A claim's start, decided twice by hand on the claimed order: the same decision both
    times, and nothing of the executor changed."""
    world, seen = _world(DecidesTwice())
    try:
        order_id = world.create()
        executor = world.executors[0]
        [claim] = world.run(executor.claim())
        aggregate = world.load(order_id)
        before = _executor_state(executor, seen)
        first = executor._decide_start(claim, aggregate)
        second = executor._decide_start(claim, aggregate)
        assert _executor_state(executor, seen) == before
        assert first[1] == second[1]
        assert first[1].plan is not None
    finally:
        world.close()


def test_a_store_of_the_contract_alone_runs_orders_and_a_batching_one_is_used_as_such() -> None:
    """The in-memory store offers the `UnitOfWork` alone: the executor claims, then writes each
    start and each result with `update`. A store that offers the batched writes gets its
    claims and starts as one `claim_and_start`, its results as `update_many`."""
    plain = InMemoryOrderStore()
    assert not isinstance(plain, GroupCommits)
    assert not isinstance(plain, ClaimsWithStarts)
    batching = _CountingBatches()
    assert isinstance(batching, GroupCommits)
    assert isinstance(batching, ClaimsWithStarts)
    for store in (plain, batching):
        world = World(executors=2, store=store, process_version=1)
        try:
            orders = [world.create() for _ in range(3)]
            world.settle()
            assert {world.state(o).value for o in orders} == {"shipped"}
        finally:
            world.close()
    assert batching.claims_with_starts > 0
    assert batching.group_commits > 0


class _CountingBatches(BatchingMemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.claims_with_starts = 0
        self.group_commits = 0

    async def update_many(self, updates: Any) -> Any:
        self.group_commits += 1
        return await super().update_many(updates)

    async def claim_and_start(self, **kwargs: Any) -> Any:
        self.claims_with_starts += 1
        return await super().claim_and_start(**kwargs)
