"""A whole orderflow on one event loop: a store (in memory unless given), a fake clock, the
simulated services in process, the service and executors."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar
from uuid import UUID

import attrs

from orderflow_core import (
    Executor,
    Item,
    OrderAggregate,
    OrderService,
    OrderState,
    Principal,
    Role,
    Timing,
    hash_token,
)
from orderflow_core.executor import Checkpoint
from orderflow_core.ports import OrderStore
from orderflow_core.process import NEWEST
from orderflow_core.relay import OutboxFeed, OutboxRelay
from orderflow_core.testing import FakeClock, InMemoryOrderStore, InMemoryUsers
from orderflow_mocks.sim_adapters import simulated_services
from orderflow_mocks.simulation import Simulator

T = TypeVar("T")

CUSTOMER = Principal("order_customer", Role.CUSTOMER)
OTHER_CUSTOMER = Principal("other_customer", Role.CUSTOMER)
OPERATOR = Principal("order_operator", Role.OPERATOR)


def sequential_ids() -> Any:
    """Deterministic UUIDs, so failing examples replay exactly."""
    counter = itertools.count(1)
    return lambda: uuid.UUID(int=next(counter))


class Driving:
    """How a test drives a whole orderflow on its own event loop; `World` (in memory) and the
    acceptance suite's `Stack` (PostgreSQL, HTTP) share it, so scenarios run on either."""

    loop: asyncio.AbstractEventLoop
    store: OrderStore
    service: OrderService
    executors: list[Executor]
    clock: FakeClock
    sim: Simulator
    relay: OutboxRelay
    order_ids: list[UUID]
    _keys: Iterator[int]

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def create(self, *items: Item, principal: Principal = CUSTOMER) -> UUID:
        lines = list(items) or [Item("sku-1", 2, 1500)]
        view, _ = self.run(
            self.service.create_order(principal, f"key-{next(self._keys)}", lines, "RUB")
        )
        order_id = view.aggregate.order.order_id
        self.order_ids.append(order_id)
        return order_id

    def load(self, order_id: UUID) -> OrderAggregate:
        aggregate = self.run(self.store.load(order_id))
        assert aggregate is not None
        return aggregate

    def state(self, order_id: UUID) -> OrderState:
        return self.load(order_id).order.state

    def step(self, executor: int = 0, limit: int | None = None) -> int:
        """One claim-and-run round of one executor; returns how many steps it claimed."""
        return self.run(self.executors[executor].run_once(limit))

    def settle(self, max_rounds: int = 200, advance_s: float = 1.0) -> None:
        """Run executors and advance time until nothing is due (bounded)."""
        idle = 0
        for _ in range(max_rounds):
            ran = sum(self.step(i) for i in range(len(self.executors)))
            if ran:
                idle = 0
                continue
            idle += 1
            if idle > 20:
                return
            self.clock.advance(advance_s)

    def states_visited(self, order_id: UUID) -> list[tuple[str | None, str]]:
        history = self.run(self.store.history(order_id))
        return [(h.from_state.value if h.from_state else None, h.to_state.value) for h in history]

    def publish(self) -> int:
        """Run the outbox relay until every committed event is in the feed; returns how many."""
        published = 0
        while ran := self.run(self.relay.run_once()):
            published += ran
        return published

    def effects(self) -> dict[str, list[dict[str, Any]]]:
        """What the simulated services did, for every order."""
        effects: dict[str, list[dict[str, Any]]] = self.sim.ledger()["effects"]
        return effects

    def charges(self, order_id: UUID) -> list[dict[str, Any]]:
        effects = self.sim.ledger(order_id=str(order_id))["effects"]
        charges: list[dict[str, Any]] = effects["charges"]
        return charges


class World(Driving):
    """Everything a scenario needs, driven step by step on one event loop."""

    def __init__(
        self,
        *,
        executors: int = 1,
        checkpoint: Checkpoint | None = None,
        store: OrderStore | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        process_version: int = NEWEST,
    ) -> None:
        # A store bound to a loop (a PgOrderStore's pool) comes with that loop.
        self.loop = loop or asyncio.new_event_loop()
        try:
            self._build(executors, checkpoint, store, process_version)
        except BaseException:  # (a mutant under test raising here): no loop left open
            if loop is None:
                self.loop.close()
            raise

    def _build(
        self,
        executors: int,
        checkpoint: Checkpoint | None,
        store: OrderStore | None,
        process_version: int,
    ) -> None:
        self.clock = FakeClock()
        self.store: OrderStore = store if store is not None else InMemoryOrderStore()
        self.order_ids: list[UUID] = []
        self.sim = Simulator(now=self.clock.now)
        self.services = simulated_services(self.sim)
        self.timing = Timing()
        new_id = sequential_ids()
        users = InMemoryUsers(
            {hash_token(p.user_id): p for p in (CUSTOMER, OTHER_CUSTOMER, OPERATOR)}
        )
        self.service = OrderService(
            self.store,
            self.clock,
            users,
            timing=self.timing,
            new_id=new_id,
            process_version=process_version,
        )
        self.executors = [
            Executor(
                store=self.store,
                services=self.services,
                clock=self.clock,
                worker_id=f"worker-{i}",
                # The second executor of a world goes straight on with each step's successor,
                # as production workers do; the first steps one claim at a time.
                timing=attrs.evolve(self.timing, chain_steps=i == 1),
                checkpoint=checkpoint,
                new_id=new_id,
            )
            for i in range(executors)
        ]
        self._keys = itertools.count(1)
        feed: OutboxFeed = self.store  # type: ignore[assignment]  # both stores are feeds too
        self.relay = OutboxRelay(feed, self.clock)

    def close(self, *, close_loop: bool = True) -> None:
        async def cancel_all() -> None:
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        try:
            self.loop.run_until_complete(cancel_all())
        finally:
            if close_loop:
                self.loop.close()
