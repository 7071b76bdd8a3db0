"""`Executor.run` claims when work may be waiting, and not otherwise: after a chained order
finishes, a claim would find nothing, so none is made until a wake-up, a backlog or the poll."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs

from orderflow_core import OrderState
from orderflow_core.context import Timing
from orderflow_core.executor import Executor
from orderflow_core.model import Claim, Item, Principal
from orderflow_core.outcomes import Outcome
from orderflow_core.ports import CallContext
from orderflow_core.service import OrderService
from orderflow_core.states import Role, StepStatus
from orderflow_core.testing import FakeClock, InMemoryUsers
from orderflow_mocks.sim_adapters import SimulatedWarehouse, simulated_services
from orderflow_mocks.simulation import Simulator
from tests_core.batching import BatchingMemoryStore

CUSTOMER = Principal("customer-1", Role.CUSTOMER)
NO_POLL = 3600.0  # only wake-ups and backlogs may cause a claim in these tests


class CountingStore(BatchingMemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.claims: list[int] = []  # how many steps each claim returned
        self.claimed_and_started: list[int] = []  # the same, per claim_and_start call
        self.batches: list[list[Any]] = []  # the order ids of each group commit
        # When set: a group commit after which one of its orders is in one of `hold_states`
        # returns only once it is set (decided and stored, its round trip not yet back).
        self.hold_shipping: asyncio.Event | None = None
        self.hold_states = frozenset({OrderState.SHIPPED})
        self.held = 0

    async def update_many(self, updates: Any) -> Any:
        ids = [order_id for order_id, _ in updates]
        self.batches.append(ids)
        results = await super().update_many(updates)
        gate = self.hold_shipping
        if gate is not None and not gate.is_set() and await self.reached(ids):
            self.held += 1
            await gate.wait()
        return results

    async def reached(self, order_ids: list[Any]) -> bool:
        """One of the orders is in one of `hold_states`."""
        for order_id in order_ids:
            aggregate = await self.load(order_id)
            if aggregate is not None and aggregate.order.state in self.hold_states:
                return True
        return False

    async def shipped(self, order_ids: list[Any], *, any_of: bool = False) -> bool:
        states = [
            aggregate is not None and aggregate.order.state is OrderState.SHIPPED
            for aggregate in [await self.load(order_id) for order_id in order_ids]
        ]
        return any(states) if any_of else all(states)

    async def claim_due(self, **kwargs: Any) -> list[Claim]:
        claimed = await super().claim_due(**kwargs)
        self.claims.append(len(claimed))
        return claimed

    async def claim_and_start(self, **kwargs: Any) -> Any:
        started = await super().claim_and_start(**kwargs)
        self.claimed_and_started.append(len(started))
        return started


class RedecidingStore(CountingStore):
    """Decides each order's first result (its second update: the first is its start) twice,
    as the PostgreSQL store does when the copy of an order it kept turns out stale: first on a
    copy whose running step is no longer this executor's (so nothing chains), then on the
    order as stored. What each decision returned, by order."""

    def __init__(self) -> None:
        super().__init__()
        self.updates: dict[Any, int] = {}
        self.values: dict[Any, list[Any]] = {}

    async def update_many(self, updates: Any) -> Any:
        for order_id, decide in updates:
            self.updates[order_id] = self.updates.get(order_id, 0) + 1
            if self.updates[order_id] != 2:
                continue
            stored = await self.load(order_id)
            assert stored is not None
            stale = attrs.evolve(
                stored,
                steps=tuple(
                    attrs.evolve(s, lease_owner="another worker")
                    if s.status is StepStatus.RUNNING
                    else s
                    for s in stored.steps
                ),
            )
            first = decide(stale)[1]
            await asyncio.sleep(0)  # the read of the order anew
            self.values[order_id] = [first, decide(stored)[1]]
        return await super().update_many(updates)


class HeldWarehouse(SimulatedWarehouse):
    """Reservations of the orders in `held` wait until `release` is set."""

    def __init__(self, sim: Simulator) -> None:
        super().__init__(sim)
        self.held: set[Any] = set()
        self.release = asyncio.Event()
        self.waiting = 0

    async def reserve(self, call: CallContext, items: Sequence[Item]) -> Outcome:
        if call.order_id in self.held:
            self.waiting += 1
            await self.release.wait()
        return await super().reserve(call, items)


class Node:
    def __init__(
        self, max_concurrent: int, store: CountingStore | None = None, *, chain: bool = True
    ) -> None:
        self.clock = FakeClock()
        self.store = store or CountingStore()
        # Version 1: the claim counts below are those of reserve, charge and ship.
        self.service = OrderService(self.store, self.clock, InMemoryUsers(), process_version=1)
        timing = Timing(max_concurrent=max_concurrent, poll_interval_s=NO_POLL, chain_steps=chain)
        simulator = Simulator(now=self.clock.now)
        services = simulated_services(simulator)
        self.warehouse = HeldWarehouse(simulator)
        self.executor = Executor(
            store=self.store,
            services=attrs.evolve(services, warehouse=self.warehouse),
            clock=self.clock,
            worker_id="w",
            timing=timing,
        )
        self._keys = itertools.count()

    async def create(self) -> Any:
        key = f"key-{next(self._keys)}"
        view, _ = await self.service.create_order(CUSTOMER, key, [Item("sku", 1, 100)], "RUB")
        return view.aggregate.order.order_id

    async def shipped(self, order_ids: list[Any]) -> bool:
        return await self.store.shipped(order_ids)

    async def idle(self) -> bool:
        return self.executor.free_slots == self.executor.timing.max_concurrent

    async def claims_once_done(
        self, order_ids: list[Any], running: asyncio.Task[None]
    ) -> list[int]:
        """Wait until the orders shipped and the executor is idle, let any wake-up's claim
        happen, then stop the executor; the sizes of every claim it made."""
        await _until(lambda: self.shipped(order_ids), "shipped")
        await _until(self.idle, "idle")
        await _settle_loop()
        claims = list(self.store.claims)
        await self.executor.stop()
        await running
        return claims


async def _until(check: Callable[[], Awaitable[bool]], what: str, deadline_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    ends = loop.time() + deadline_s
    while not await check():
        assert loop.time() < ends, f"not {what} within {deadline_s} s"
        await asyncio.sleep(0.001)


async def _settle_loop() -> None:
    """Let every callback that is already due run (a wake-up's claim among them)."""
    for _ in range(50):
        await asyncio.sleep(0)


def test_a_finished_chained_order_is_not_followed_by_an_empty_claim() -> None:
    async def scenario() -> list[int]:
        node = Node(max_concurrent=4)
        order_id = await node.create()
        running = asyncio.create_task(node.executor.run())
        return await node.claims_once_done([order_id], running)

    assert asyncio.run(scenario()) == [1], "one claim carried the order; no empty claim after"


def test_a_wake_up_claims_the_new_work_once() -> None:
    async def scenario() -> list[int]:
        node = Node(max_concurrent=4)
        running = asyncio.create_task(node.executor.run())
        await _until(lambda: _true(node.store.claims), "the first claim")
        order_id = await node.create()
        node.executor.wake()  # as LISTEN/NOTIFY does when the order's first step is inserted
        return await node.claims_once_done([order_id], running)

    assert asyncio.run(scenario()) == [0, 1]


def test_a_backlog_is_drained_by_claiming_as_slots_free_without_waiting_for_the_poll() -> None:
    async def scenario() -> list[int]:
        node = Node(max_concurrent=4)
        order_ids = [await node.create() for _ in range(10)]
        running = asyncio.create_task(node.executor.run())
        return await node.claims_once_done(order_ids, running)

    claims = asyncio.run(scenario())
    assert sum(claims) == 10
    assert claims[0] == 4, "the first claim filled every slot"
    assert claims[-1] < 4, "claiming stopped once a claim came back short"


def test_a_slot_that_frees_under_a_backlog_is_claimed_at_once_not_when_more_have_freed() -> None:
    async def scenario() -> tuple[bool, list[int]]:
        node = Node(max_concurrent=8)
        order_ids = [await node.create() for _ in range(9)]
        node.warehouse.held.update(order_ids[1:8])  # seven slots stay busy
        running = asyncio.create_task(node.executor.run())
        # The first order ships and frees its slot: the ninth is claimed into it and ships,
        # with the seven others still in their calls (and no poll to fall back on).
        await _until(lambda: node.shipped([order_ids[0], order_ids[8]]), "two shipped")
        still_held = not await node.shipped(order_ids[1:8])
        node.warehouse.release.set()
        return still_held, await node.claims_once_done(order_ids, running)

    still_held, claims = asyncio.run(scenario())
    assert still_held
    assert claims[:2] == [8, 1], "one free slot, one claim"
    assert sum(claims) == 9


def test_the_slot_of_a_result_that_cannot_chain_is_given_back_before_its_commit() -> None:
    async def scenario() -> tuple[int, bool, list[int]]:
        node = Node(max_concurrent=1, chain=False)
        order_ids = [await node.create() for _ in range(2)]
        gate = node.store.hold_shipping = asyncio.Event()
        running = asyncio.create_task(node.executor.run())
        # One slot, chaining off: every result is its task's last commit, so its slot is
        # given back before that commit runs, free for a claim while it runs. The first
        # ship result's commit is held; the slot is free meanwhile.
        await _until(lambda: _true(node.store.held), "the last commit of the first order held")
        await _until(node.idle, "the slot given back while the commit is held")
        both_shipped_while_held = await node.store.shipped(order_ids)
        gate.set()
        claims = await node.claims_once_done(order_ids, running)
        return node.store.held, both_shipped_while_held, claims

    held, both_shipped_while_held, claims = asyncio.run(scenario())
    assert held == 1
    assert not both_shipped_while_held
    assert sum(claims) == 6, "reserve, charge and ship of each order, each claimed"


def test_the_slot_of_a_success_that_ends_the_sequence_is_given_back_before_its_commit() -> None:
    async def scenario() -> tuple[int, list[int], list[int]]:
        node = Node(max_concurrent=1)
        order_ids = [await node.create() for _ in range(2)]
        gate = node.store.hold_shipping = asyncio.Event()
        running = asyncio.create_task(node.executor.run())
        # One slot, chaining on: the first order's chain runs to its ship result, whose commit
        # is held. A ship success ends the main sequence, which the executor knows from the
        # order's process version before deciding, so it decides it without chaining and the
        # slot is free while the commit runs: the second order is claimed meanwhile.
        await _until(lambda: _true(node.store.held), "the last commit of the first order held")
        await _until(lambda: _true(len(node.store.claims) == 2), "a claim while it is held")
        claims_while_held = list(node.store.claims)
        gate.set()
        claims = await node.claims_once_done(order_ids, running)
        return node.store.held, claims_while_held, claims

    held, claims_while_held, claims = asyncio.run(scenario())
    assert held == 1
    assert claims_while_held == [1, 1], "the second order claimed while the first's commit ran"
    assert sum(claims) == 2, "each order ran as one chain from its one claim"


def test_the_slot_of_a_chaining_result_is_held_until_its_commit_returns() -> None:
    async def scenario() -> tuple[int, int, list[int], list[int]]:
        node = Node(max_concurrent=1)
        order_ids = [await node.create() for _ in range(2)]
        gate = node.store.hold_shipping = asyncio.Event()
        # The charge result's commit: it chains the ship step, so the order is shipping.
        node.store.hold_states = frozenset({OrderState.SHIPPING})
        running = asyncio.create_task(node.executor.run())
        # One slot: the first order's charge result, which chains its shipping, is held in its
        # commit. Whether such a result chains is known only from the decision the store
        # returns (which may be taken twice), so the slot stays with the task until then.
        await _until(lambda: _true(node.store.held), "the charge's commit held")
        await _settle_loop()
        free_while_held, claims_while_held = node.executor.free_slots, list(node.store.claims)
        gate.set()
        claims = await node.claims_once_done(order_ids, running)
        return node.store.held, free_while_held, claims_while_held, claims

    held, free_while_held, claims_while_held, claims = asyncio.run(scenario())
    assert held == 1
    assert free_while_held == 0
    assert claims_while_held == [1], "no claim while the chaining result's commit runs"
    assert sum(claims) == 2


def test_a_result_decided_again_acts_on_the_decision_the_store_kept() -> None:
    async def scenario() -> tuple[list[Any], dict[Any, list[Any]], list[int]]:
        store = RedecidingStore()
        node = Node(max_concurrent=1, store=store)
        order_ids = [await node.create() for _ in range(2)]
        running = asyncio.create_task(node.executor.run())
        return order_ids, store.values, await node.claims_once_done(order_ids, running)

    order_ids, values, claims = asyncio.run(scenario())
    # Each reserve result, decided on a stale copy, chained nothing; decided again on the
    # stored order it chains the charge, and the executor goes on with that (the first
    # decision changed nothing of it).
    assert set(values) == set(order_ids)
    for first, second in values.values():
        assert (first.following, first.rejected) == (None, "stale_generation")
        assert second.following is not None
        assert second.rejected is None
    assert sum(claims) == 2, "each order ran as one chain from its one claim"


def test_a_claim_and_the_intents_it_starts_are_one_store_call_not_the_writers() -> None:
    async def scenario() -> tuple[list[Any], list[int], list[list[Any]], int]:
        node = Node(max_concurrent=4)
        order_ids = [await node.create() for _ in range(3)]
        node.warehouse.held.update(order_ids)  # the calls wait: only the starts are written
        running = asyncio.create_task(node.executor.run_once())
        await _until(lambda: _true(node.warehouse.waiting == 3), "three calls under way")
        calls, batches = list(node.store.claimed_and_started), list(node.store.batches)
        writer_batches = node.executor.commits.batches
        node.warehouse.release.set()
        await running
        return order_ids, calls, batches, writer_batches

    order_ids, calls, batches, writer_batches = asyncio.run(scenario())
    assert calls == [3], "one claim_and_start call claimed and started all three"
    assert batches == [order_ids], "the three intents, one group commit inside it"
    assert writer_batches == 0, "the results' writer carried none of them"


async def _true(value: object) -> bool:
    return bool(value)


class HeldStartsStore(CountingStore):
    """Group commits return only once `release` is set (the starts' among them)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def update_many(self, updates: Any) -> Any:
        results = await super().update_many(updates)
        await self.release.wait()
        return results


def test_stop_counts_the_steps_of_a_claim_whose_intents_are_still_being_committed() -> None:
    async def scenario() -> tuple[int, int]:
        store = HeldStartsStore()
        node = Node(max_concurrent=3, store=store)
        for _ in range(3):
            await node.create()
        running = asyncio.create_task(node.executor.run())
        await _until(lambda: _true(store.batches), "the claimed steps' starts being committed")
        in_flight = node.executor.timing.max_concurrent - node.executor.free_slots
        abandoned = await node.executor.stop(grace_s=0.01)
        store.release.set()
        await running
        return in_flight, abandoned

    in_flight, abandoned = asyncio.run(scenario())
    assert in_flight == 3, "a claim holds its slots while the intents it starts are committed"
    assert abandoned == 3, "stop reports them as left to lease expiry, not as finished"


def test_stop_waits_for_a_claim_under_way_and_runs_the_steps_it_started() -> None:
    async def scenario() -> tuple[int, list[OrderState]]:
        store = HeldStartsStore()
        node = Node(max_concurrent=3, store=store)
        order_ids = [await node.create() for _ in range(3)]
        running = asyncio.create_task(node.executor.run())
        await _until(lambda: _true(store.batches), "the claimed steps' starts being committed")
        stopping = asyncio.create_task(node.executor.stop(grace_s=30))
        store.release.set()  # the claim returns while stop waits for it
        abandoned = await stopping
        await running
        loaded = [await store.load(order_id) for order_id in order_ids]
        return abandoned, [a.order.state for a in loaded if a is not None]

    abandoned, states = asyncio.run(scenario())
    assert abandoned == 0, "every step the claim started finished within the grace period"
    # Each reserve ran and its result was committed; nothing is chained once stopping.
    assert states == [OrderState.RESERVED] * 3
