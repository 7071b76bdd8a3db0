"""`PgOrderStore.claim_and_start`: a claim and the intents it starts in one transaction."""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import AsyncExitStack
from typing import Any

import attrs
import psycopg
import pytest
from builders import T0, creation, new_order
from conftest import Run

from orderflow_core import saga
from orderflow_core.context import Context
from orderflow_core.errors import StoreUnavailable
from orderflow_core.model import Change, Claim, OrderAggregate
from orderflow_core.states import OrderState, StepStatus
from orderflow_core.steps.definition import CallPlan
from orderflow_pg import PgOrderStore

pytestmark = pytest.mark.postgres

Start = tuple[Change, CallPlan | None]


def _start(claim: Claim, aggregate: OrderAggregate) -> Start:
    return saga.decide_start(aggregate, claim, Context(T0, claim.owner))


def _orders(store: PgOrderStore, run: Run[Any], n: int) -> list[Any]:
    orders = [new_order() for _ in range(n)]
    for order in orders:
        run(store.create(creation(order, key=None)))
    return [order.order_id for order in orders]


def _claim_and_start(
    store: PgOrderStore, run: Run[Any], start: Any = _start, limit: int = 10, owner: str = "A"
) -> list[tuple[Claim, Any]]:
    found: list[tuple[Claim, Any]] = run(
        store.claim_and_start(owner=owner, now=T0, limit=limit, lease_s=30, start=start)
    )
    return found


def test_a_claim_and_the_intents_it_starts_are_committed_together(
    pg_store: PgOrderStore, run: Run[Any]
) -> None:
    order_ids = _orders(pg_store, run, 3)
    started = _claim_and_start(pg_store, run)
    assert sorted(c.order_id for c, _ in started) == sorted(order_ids)
    assert all(isinstance(plan, CallPlan) for _, plan in started)
    for claim, _ in started:
        aggregate = run(pg_store.load(claim.order_id))
        assert aggregate is not None
        assert aggregate.order.state is OrderState.RESERVING  # the start's transition
        step = aggregate.step(claim.step_id)
        assert step is not None
        assert (step.status, step.attempt, step.lease_owner) == (StepStatus.RUNNING, 1, "A")
        assert [(a.attempt, a.outcome) for a in step.attempts] == [(1, None)]  # the intent
    assert run(pg_store.claim_due(owner="B", now=T0, limit=10, lease_s=30)) == []


def test_a_claim_whose_transaction_is_lost_leaves_its_steps_due_at_once(
    pg_store: PgOrderStore, pg_url: str, run: Run[Any]
) -> None:
    """Before the claim shared its intents' transaction, a claim committed on its own: a
    start that failed left the step leased, so nobody could run it until its lease ran out."""
    [order_id] = _orders(pg_store, run, 1)

    def start_then_lose_the_connection(claim: Claim, aggregate: OrderAggregate) -> Start:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND state = 'idle in transaction'"
                " AND pid <> pg_backend_pid()"
            ).fetchall()
        assert ended == [(True,)], "the claim's own transaction, waiting for its intents"
        return _start(claim, aggregate)

    with pytest.raises(StoreUnavailable):
        _claim_and_start(pg_store, run, start_then_lose_the_connection)
    [again] = run(pg_store.claim_due(owner="B", now=T0, limit=10, lease_s=30))
    assert (again.order_id, again.attempt) == (order_id, 1), "due at once, never leased"
    aggregate = run(pg_store.load(order_id))
    assert aggregate is not None
    assert aggregate.order.state is OrderState.CREATED


def test_a_start_that_cannot_be_written_fails_alone_and_the_others_start(
    pg_store: PgOrderStore, run: Run[Any]
) -> None:
    order_ids = _orders(pg_store, run, 3)
    bad = order_ids[1]

    def start(claim: Claim, aggregate: OrderAggregate) -> Start:
        change, plan = _start(claim, aggregate)
        if claim.order_id == bad:  # an event that contradicts its history entry
            [event] = change.events
            change = attrs.evolve(change, events=(attrs.evolve(event, payload={"x": 1}),))
        return change, plan

    started = {c.order_id: result for c, result in _claim_and_start(pg_store, run, start)}
    assert isinstance(started.pop(bad), ValueError)  # the store refused to write it
    assert all(isinstance(plan, CallPlan) for plan in started.values())
    states = {i: run(pg_store.load(i)).order.state for i in order_ids}  # type: ignore[union-attr]
    assert states == {
        order_ids[0]: OrderState.RESERVING,
        bad: OrderState.CREATED,  # its step is leased without an intent, as any failed start
        order_ids[2]: OrderState.RESERVING,
    }


def test_four_stores_claiming_and_starting_at_once_start_each_step_exactly_once(
    pg_store: PgOrderStore, pg_url: str, run: Run[Any]
) -> None:
    order_ids = _orders(pg_store, run, 200)

    async def until_empty(store: PgOrderStore, owner: str) -> list[Claim]:
        claimed: list[Claim] = []
        while batch := await store.claim_and_start(
            owner=owner, now=T0, limit=7, lease_s=30, start=_start
        ):
            assert all(isinstance(plan, CallPlan) for _, plan in batch)
            claimed.extend(claim for claim, _ in batch)
        return claimed

    async def four() -> list[Claim]:
        async with AsyncExitStack() as stack:
            stores = [
                await stack.enter_async_context(PgOrderStore.open(pg_url, max_size=1))
                for _ in range(4)
            ]
            async with asyncio.timeout(60):  # a deadlock would hold them (PostgreSQL: 1 s each)
                found = await asyncio.gather(
                    *(until_empty(s, f"executor-{i}") for i, s in enumerate(stores))
                )
        return [claim for batch in found for claim in batch]

    claims = run(four())
    assert Counter(c.step_id for c in claims).most_common(1)[0][1] == 1
    assert sorted(c.order_id for c in claims) == sorted(order_ids)
    assert len({c.owner for c in claims}) > 1, "the work was spread across the stores"
    states = {run(pg_store.load(i)).order.state for i in order_ids}  # type: ignore[union-attr]
    assert states == {OrderState.RESERVING}
