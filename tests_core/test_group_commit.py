"""Group commit: the executor's results go to the store through one writer that sends what
queued up while its previous commit ran as one `update_many`; each caller gets its own value
(or its own exception) only once the store call carrying its change returned."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

import pytest

from orderflow_core import OrderState
from orderflow_core.commits import CommitQueue
from orderflow_core.errors import NotFound, StoreUnavailable
from orderflow_core.model import Change, Item, OrderAggregate
from tests_core.batching import BatchingMemoryStore
from tests_core.world import World

Decide = Callable[[OrderAggregate], tuple[Change, Any]]


class GatedStore:
    """`update_many` that records each batch and waits for the test to let it finish."""

    def __init__(self) -> None:
        self.batches: list[list[UUID]] = []
        self.gates: list[asyncio.Event] = []
        self.fail_next: Exception | None = None

    async def update_many(self, updates: Sequence[tuple[UUID, Decide]]) -> list[Any]:
        self.batches.append([order_id for order_id, _ in updates])
        gate = asyncio.Event()
        self.gates.append(gate)
        await gate.wait()
        if self.fail_next is not None:
            failure, self.fail_next = self.fail_next, None
            raise failure
        return [
            NotFound("gone") if order_id.int == 0 else f"value {order_id}"
            for order_id, _ in updates
        ]


def unchanged(aggregate: OrderAggregate) -> tuple[Change, None]:
    return Change(), None


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(100):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


def test_an_idle_writer_commits_at_once_and_groups_what_queued_meanwhile() -> None:
    async def scenario() -> None:
        store = GatedStore()
        queue = CommitQueue(store)  # type: ignore[arg-type]
        first, second, third = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        a = asyncio.create_task(queue.update(first, unchanged))
        await until(lambda: len(store.batches) == 1)  # no waiting for company
        assert store.batches == [[first]]
        b = asyncio.create_task(queue.update(second, unchanged))
        c = asyncio.create_task(queue.update(third, unchanged))
        await until(lambda: len(store.batches) == 1 and not a.done())
        store.gates[0].set()
        assert await a == f"value {first}"
        await until(lambda: len(store.batches) == 2)
        assert store.batches[1] == [second, third]  # what piled up goes in one commit
        for _ in range(5):
            await asyncio.sleep(0)
        assert not b.done(), "no value before its commit returned"
        assert not c.done()
        store.gates[1].set()
        assert (await b, await c) == (f"value {second}", f"value {third}")

    asyncio.run(scenario())


def test_each_caller_gets_its_own_failure_and_the_writer_goes_on() -> None:
    async def scenario() -> None:
        store = GatedStore()
        queue = CommitQueue(store)  # type: ignore[arg-type]
        gone, fine = UUID(int=0), uuid.uuid4()
        a = asyncio.create_task(queue.update(gone, unchanged))
        b = asyncio.create_task(queue.update(fine, unchanged))
        await until(lambda: len(store.batches) == 1)
        store.gates[0].set()
        with pytest.raises(NotFound):
            await a
        assert await b == f"value {fine}"
        # A store error fails the whole batch it hit, and the next batch still goes out.
        store.fail_next = StoreUnavailable("down")
        c = asyncio.create_task(queue.update(fine, unchanged))
        await until(lambda: len(store.batches) == 2)
        store.gates[1].set()
        with pytest.raises(StoreUnavailable):
            await c
        d = asyncio.create_task(queue.update(fine, unchanged))
        await until(lambda: len(store.batches) == 3)
        store.gates[2].set()
        assert await d == f"value {fine}"

    asyncio.run(scenario())


class BatchCountingStore(BatchingMemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.batch_sizes: list[int] = []

    async def update_many(self, updates: Sequence[tuple[UUID, Decide]]) -> list[Any]:
        self.batch_sizes.append(len(updates))
        return await super().update_many(updates)


def test_an_executor_commits_the_results_of_concurrent_steps_together() -> None:
    store = BatchCountingStore()
    w = World(store=store)
    try:
        orders = [w.create(Item("sku-1", 1, 100)) for _ in range(6)]
        assert w.step() == 6  # six reserve steps claimed, called and committed
        assert all(w.state(o) is OrderState.RESERVED for o in orders)
        # The claim batch's intents are one batch, the six results fewer batches than six.
        assert store.batch_sizes[0] == 6
        assert sum(store.batch_sizes[1:]) == 6
        assert len(store.batch_sizes[1:]) < 6, store.batch_sizes
        w.settle()
        assert all(w.state(o) is OrderState.SHIPPED for o in orders)
    finally:
        w.close()
