"""A whole orderflow on one event loop, over any store: a fake clock, the simulated services
(or services built on them), the service and two executors, driven step by step."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar
from uuid import UUID

import attrs

from orderflow_core import (
    Executor,
    Item,
    OrderAggregate,
    OrderService,
    Services,
    Timing,
    hash_token,
)
from orderflow_core.executor import Checkpoint
from orderflow_core.ports import OrderStore
from orderflow_core.process import NEWEST
from orderflow_core.relay import OutboxFeed, OutboxRelay
from orderflow_core.testing import FakeClock, InMemoryUsers
from orderflow_mocks.simulation import Simulator
from orderflow_testing.strategies import CUSTOMER, OPERATOR

T = TypeVar("T")
ServicesFactory = Callable[[Simulator], Services]


class SimWorld:
    """One store (also an outbox feed, as both shipped stores are), a `FakeClock`, a
    `Simulator` whose ledger the rules read, and executors `worker-0`, `worker-1`…

    The second executor goes straight on with each step's successor (chaining), as
    production workers do; the first steps one claim at a time.
    """

    def __init__(
        self,
        store: OrderStore,
        loop: asyncio.AbstractEventLoop,
        services: ServicesFactory,
        *,
        executors: int = 2,
        checkpoint: Checkpoint | None = None,
        timing: Timing | None = None,
        process_version: int = NEWEST,
    ) -> None:
        self.loop = loop
        self.store = store
        self.clock = FakeClock()
        self.timing = timing or Timing()
        self.sim = Simulator(now=self.clock.now)
        self.order_ids: list[UUID] = []
        counter = itertools.count(1)

        def new_id() -> UUID:  # deterministic, so failing examples replay exactly
            return uuid.UUID(int=next(counter))

        users = InMemoryUsers({hash_token(p.user_id): p for p in (CUSTOMER, OPERATOR)})
        self.service = OrderService(
            store,
            self.clock,
            users,
            timing=self.timing,
            new_id=new_id,
            process_version=process_version,
        )
        self.executors = [
            Executor(
                store=store,
                services=services(self.sim),
                clock=self.clock,
                worker_id=f"worker-{i}",
                timing=attrs.evolve(self.timing, chain_steps=i == 1),
                checkpoint=checkpoint,
                new_id=new_id,
            )
            for i in range(executors)
        ]
        feed: OutboxFeed = store  # type: ignore[assignment]  # a store is asked to be a feed
        self.relay = OutboxRelay(feed, self.clock)
        self._keys = itertools.count(1)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def create(self, *items: Item) -> UUID:
        lines = list(items) or [Item("sku-1", 2, 1500)]
        key = f"key-{next(self._keys)}"
        view, _ = self.run(self.service.create_order(CUSTOMER, key, lines, "RUB"))
        order_id = view.aggregate.order.order_id
        self.order_ids.append(order_id)
        return order_id

    def load(self, order_id: UUID) -> OrderAggregate:
        aggregate = self.run(self.store.load(order_id))
        assert aggregate is not None, f"order {order_id} cannot be loaded"
        return aggregate

    def step(self, executor: int = 0, limit: int | None = None) -> int:
        """One claim-and-run round of one executor; returns how many steps it claimed."""
        return self.run(self.executors[executor].run_once(limit))

    def settle(self, max_rounds: int = 200, advance_s: float = 1.0) -> None:
        """Run the executors and advance time until nothing is due (bounded)."""
        idle = 0
        for _ in range(max_rounds):
            if sum(self.step(i) for i in range(len(self.executors))):
                idle = 0
                continue
            idle += 1
            if idle > 20:
                return
            self.clock.advance(advance_s)

    def publish(self) -> int:
        """Run the outbox relay until every committed event is in the feed."""
        published = 0
        while ran := self.run(self.relay.run_once()):
            published += ran
        return published

    def effects(self) -> dict[str, list[dict[str, Any]]]:
        """What the simulated services did, for every order."""
        effects: dict[str, list[dict[str, Any]]] = self.sim.ledger()["effects"]
        return effects
