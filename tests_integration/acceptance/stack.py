"""The whole orderflow for the acceptance suite: PostgreSQL, the simulated services over real
HTTP (`running_mocks` + the `Http*` clients), a FakeClock, several in-process executors, the
outbox relay and the REST API on a real socket.

`Stack` speaks the same language as `tests_core.world.World` (create, step, settle, state,
load, sim, service, clock, timing, run…), so the core's named scenarios and reachers run on it
unchanged — on the real store and the real wire.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any, TypeVar
from uuid import UUID

from api_harness import PRINCIPALS, TOKENS, Api, Reply, serve

from orderflow_core import Executor, OrderAggregate, OrderService
from orderflow_core.context import Timing
from orderflow_core.model import AuditEntry, Claim
from orderflow_core.ports import Services
from orderflow_core.relay import OutboxRelay
from orderflow_core.service import hash_token
from orderflow_core.testing import FakeClock, InMemoryUsers
from orderflow_http import HttpPayments, HttpShipping, HttpWarehouse
from orderflow_mocks import running_mocks
from orderflow_mocks.simulation import Simulator
from orderflow_pg import PgOrderStore
from tests_core.rules import check_snapshot, take_snapshot
from tests_core.world import Driving

T = TypeVar("T")
Hook = Callable[[str, Claim], Awaitable[None]]
# Real seconds: the call deadline is the one thing the FakeClock does not govern.
CALL_TIMEOUT_S = 0.3
HOLD_S = 0.6


class Crash(Exception):
    """Raised at a checkpoint: the executor stops there as a SIGKILL would stop it."""


def crash_at(point: str, kind: object, worker: str = "worker-0") -> Hook:
    """A checkpoint hook that kills `worker` at `point` of a step of `kind`, once."""
    fired: list[bool] = []

    async def hook(name: str, claim: Claim) -> None:
        if name == point and claim.kind is kind and claim.owner == worker and not fired:
            fired.append(True)
            raise Crash(f"{worker} killed at {point} of {claim.kind.value}")

    return hook


class Stack(Driving):
    """Everything one acceptance scenario needs, driven step by step on one event loop."""

    def __init__(self, url: str, *, executors: int = 2) -> None:
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()
        self.timing = Timing(call_timeout_s=CALL_TIMEOUT_S)
        self.sim = Simulator(now=self.clock.now)
        self.order_ids: list[UUID] = []
        self.hook: Hook | None = None  # the executors' checkpoint; a test sets it
        self._resources = AsyncExitStack()
        self._keys = itertools.count(1)
        try:
            self.run(self._open(url, executors))
        except BaseException:
            self.close()
            raise

    async def _open(self, url: str, executors: int) -> None:
        enter = self._resources.enter_async_context
        self.store = await enter(PgOrderStore.open(url, max_size=16))
        self.mocks_url = (await enter(running_mocks(sim=self.sim, hold_s=HOLD_S))).url
        services = Services(
            await enter(HttpWarehouse(self.mocks_url, timeout_s=CALL_TIMEOUT_S)),
            await enter(HttpPayments(self.mocks_url, timeout_s=CALL_TIMEOUT_S)),
            await enter(HttpShipping(self.mocks_url, timeout_s=CALL_TIMEOUT_S)),
        )
        users = InMemoryUsers({hash_token(TOKENS[n]): p for n, p in PRINCIPALS.items()})
        self.service = OrderService(self.store, self.clock, users, timing=self.timing)
        self.executors = [
            Executor(
                store=self.store,
                services=services,
                clock=self.clock,
                worker_id=f"worker-{i}",
                timing=self.timing,
                checkpoint=self._checkpoint,
            )
            for i in range(executors)
        ]
        self.relay = OutboxRelay(self.store, self.clock)
        self.api: Api = await enter(serve(self.service))

    async def _checkpoint(self, name: str, claim: Claim) -> None:
        if self.hook is not None:
            await self.hook(name, claim)

    def close(self) -> None:
        async def shut() -> None:
            try:
                await self._resources.aclose()
            finally:
                mine = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in mine:
                    task.cancel()
                await asyncio.gather(*mine, return_exceptions=True)

        try:
            self.loop.run_until_complete(shut())
        finally:
            self.loop.close()

    # -- beyond the shared vocabulary (tests_core.world.Driving) -------------------------------
    def compete(self, rounds: int = 100, advance_s: float = 1.0, limit: int | None = None) -> None:
        """Every executor claims at the same moment (at most `limit` steps each), over and
        over, until nothing is due."""
        for _ in range(rounds):
            ran = self.run(_gather(*(e.run_once(limit) for e in self.executors)))
            if not sum(ran):
                if not any(self.load(o).steps and _live(self.load(o)) for o in self.order_ids):
                    return
                self.clock.advance(advance_s)

    def audit(self, order_id: UUID) -> list[AuditEntry]:
        return self.run(self.store.audit_entries(order_id))

    def ledger(self, order_id: UUID | None = None) -> dict[str, Any]:
        return self.sim.ledger(order_id=str(order_id) if order_id else None)

    # -- the API and the criteria --------------------------------------------------------------
    def call(self, method: str, path: str, **options: Any) -> Reply:
        """One request to the live API (checked against the OpenAPI document)."""
        reply: Reply = self.run(self.api.call(method, path, **options))
        return reply

    def check_criteria(self) -> None:
        """After every scenario: the six rules over every order, the ledger and the feed."""
        self.publish()
        check_snapshot(self.run(take_snapshot(self.store, self.order_ids, self.effects())))


def _live(aggregate: OrderAggregate) -> bool:
    return any(s.is_due_or_running for s in aggregate.steps)


async def _gather(*aws: Awaitable[int]) -> list[int]:
    return list(await asyncio.gather(*aws))
