"""Every representation of an order comes from one snapshot: its `state` is always the `to` of
its last history entry, however the reads interleave with the executor's commits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

import pytest
from api_harness import ORDER_BODY, Api, live, make_world

from orderflow_core.context import Context
from orderflow_core.draft import Draft
from orderflow_core.model import Change, OrderAggregate
from orderflow_core.ports import OrderStore
from orderflow_core.states import OrderState as S
from orderflow_core.steps.registry import STEPS
from orderflow_core.testing import InMemoryOrderStore

# A path through the lifecycle: the next state a "concurrent writer" moves an order to.
NEXT = {
    S.CREATED: S.RESERVING,
    S.RESERVING: S.RESERVED,
    S.RESERVED: S.PAYING,
    S.PAYING: S.PAID,
    S.PAID: S.SHIPPING,
    S.SHIPPING: S.SHIPPED,
}
READS = frozenset({"load", "history", "load_with_history", "find_idempotency", "audit_entries"})


class CommitsBetweenReads:
    """The store, but every read is followed by a commit that moves the order one state on:
    as if a worker always committed between any two statements a reader runs."""

    def __init__(self, store: OrderStore, now: Callable[[], Any]) -> None:
        self.inner = store
        self.now = now
        self.order_id: UUID | None = None

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if name not in READS:
            return found

        async def read_then_commit(*args: Any, **kwargs: Any) -> Any:
            result = await found(*args, **kwargs)
            await self._advance()
            return result

        return read_then_commit

    async def _advance(self) -> None:
        if self.order_id is None:
            return

        def decide(aggregate: OrderAggregate) -> tuple[Change, None]:
            to = NEXT.get(aggregate.order.state)
            if to is None:
                return Change(), None
            draft = Draft(aggregate, Context(self.now(), "system:test-writer"), STEPS)
            draft.move(to, "moved by a concurrent writer")
            return draft.change(), None

        await self.inner.update(self.order_id, decide)


def _assert_consistent(order: dict[str, Any]) -> None:
    assert order["state"] == order["history"][-1]["to"], order["history"]


def _check_every_view(store: OrderStore, run: Any = None) -> None:
    world = make_world(store)
    interleaved = CommitsBetweenReads(store, world.clock.now)
    world.service._store = interleaved  # type: ignore[assignment]  # the service reads through it
    with live(world, run=run) as api:
        order_id = api.create(key="k").body["order_id"]
        interleaved.order_id = UUID(order_id)
        seen = set()
        for _ in range(3):
            reply = api("GET", f"/api/v1/orders/{order_id}")
            assert reply.status == 200
            _assert_consistent(reply.body)
            seen.add(reply.body["state"])
            replay = api("POST", "/api/v1/orders", key="k", body=ORDER_BODY)
            assert replay.headers["Idempotent-Replayed"] == "true"
            _assert_consistent(replay.body)
            seen.add(replay.body["state"])
        assert len(seen) > 1  # the writer did move the order while it was being read


def test_a_commit_between_reads_never_shows_a_contradicting_order_in_memory() -> None:
    _check_every_view(InMemoryOrderStore())


@pytest.mark.postgres
def test_a_commit_between_reads_never_shows_a_contradicting_order_on_postgresql(
    pg_store: Any, run: Any
) -> None:
    _check_every_view(pg_store, run)


async def _poll_until_shipped(api: Api, order_ids: list[str], deadline: float) -> int:
    polls = 0
    pending = set(order_ids)
    while pending:
        assert time.monotonic() < deadline, f"not shipped in time: {pending}"
        for order_id in list(pending):
            reply = await api.call("GET", f"/api/v1/orders/{order_id}")
            polls += 1
            _assert_consistent(reply.body)
            if reply.body["state"] == "shipped":
                pending.discard(order_id)
    return polls


async def _run_until(stop: asyncio.Event, work: Callable[[], Awaitable[object]]) -> None:
    while not stop.is_set():
        await work()


@pytest.mark.postgres
def test_polling_orders_while_a_worker_runs_them_shows_each_order_consistent(
    pg_store: Any, run: Any
) -> None:
    world = make_world(pg_store)
    with live(world, run=run) as api:
        order_ids = [api.create(key=f"k-{n}").body["order_id"] for n in range(20)]

        async def poll_while_working() -> int:
            stop = asyncio.Event()
            worker = asyncio.create_task(_run_until(stop, world.executor.run_once))
            try:
                return await _poll_until_shipped(api.api, order_ids, time.monotonic() + 60)
            finally:
                stop.set()
                await worker

        polls = api.run(poll_while_working())
        assert polls > len(order_ids)  # orders were seen on their way, not only at the end
