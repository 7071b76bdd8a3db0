"""A commit whose answer is lost: the server committed, the connection died before the client
heard it (a primary that dies right after committing, before a failover). orderflow must treat
the outcome as unknown — neither as done nor as failed-and-redone blindly — and the rules still
hold: no second charge, no lost order, no event twice.

A TCP proxy between orderflow and the real PostgreSQL forwards the client's COMMIT (or the one
autocommit statement that is the commit), lets the server answer, and cuts every connection
instead of passing the answer on.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import psycopg
import pytest
from conftest import Run
from tcp_proxy import PausableProxy

from orderflow_core import Executor, Item, OrderService, Principal, Role
from orderflow_core.context import Timing
from orderflow_core.errors import StoreUnavailable
from orderflow_core.model import OutboxEvent, Step
from orderflow_core.relay import OutboxRelay
from orderflow_core.states import OrderState, StepKind
from orderflow_core.testing import FakeClock, InMemoryUsers
from orderflow_mocks.sim_adapters import simulated_services
from orderflow_mocks.simulation import Simulator
from orderflow_pg import PgOrderStore

pytestmark = pytest.mark.postgres
CUSTOMER = Principal("order_customer", Role.CUSTOMER)
# psycopg ends a transaction with a simple Query message carrying "COMMIT".
COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"
# The description line of the write statement (queries.sql `apply_changes`), sent with it: in
# autocommit that statement is the commit.
WRITE = b"Write decided changes"
TIMING = Timing(lease_s=5.0, heartbeat_s=2.0)
ORDER_COUNT = "SELECT count(*) FROM orders"


@pytest.fixture
def proxy(pg_url: str) -> Iterator[PausableProxy]:
    with PausableProxy.to_database(pg_url) as running:
        yield running


def test_a_claim_whose_commit_answer_is_lost_is_retried_under_its_key_and_charges_once(
    proxy: PausableProxy, pg_url: str, run: Run[Any]
) -> None:
    clock = FakeClock()
    sim = Simulator(now=clock.now)
    armed = False

    async def scenario() -> tuple[UUID, Step, list[OutboxEvent]]:
        nonlocal armed
        async with (
            PgOrderStore.open(pg_url, max_size=4) as direct,
            PgOrderStore.open(proxy.url(pg_url), min_size=1, max_size=4) as store,
        ):
            service = OrderService(direct, clock, InMemoryUsers())
            view, _ = await service.create_order(CUSTOMER, "lost-1", [Item("sku", 1, 700)], "RUB")
            order_id = view.aggregate.order.order_id
            executor = Executor(
                store=store,
                services=simulated_services(sim),
                clock=clock,
                worker_id="worker-lost",
                timing=TIMING,
            )
            for _ in range(40):
                aggregate = await direct.load(order_id)
                assert aggregate is not None
                if aggregate.order.state is OrderState.SHIPPED:
                    break
                charge = list(aggregate.steps_of(StepKind.CHARGE))
                if charge and not charge[0].attempts and not armed:
                    # The claim of the charge: BEGIN, claim, intent, COMMIT — its answer lost.
                    proxy.lose_reply_to(COMMIT)
                    armed = True
                with contextlib.suppress(StoreUnavailable):  # the claim's answer was lost
                    await executor.run_once()
                clock.advance(TIMING.lease_s + 1)  # past any lease left by the lost answer
            final = await direct.load(order_id)
            assert final is not None
            assert final.order.state is OrderState.SHIPPED, final.order.state
            [charge] = final.steps_of(StepKind.CHARGE)
            relay = OutboxRelay(direct, clock)  # the feed: what the relay hands on, once each
            while await relay.run_once():
                pass
            events = await direct.events(after=0, limit=1000)
            return order_id, charge, events

    order_id, charge, events = run(scenario())
    assert proxy.replies_lost == 1, "the COMMIT's answer was lost once"
    # The lost commit had committed: its intent is there, an attempt that never reported back,
    # and the charge was made by a later attempt, under the step's one idempotency key.
    assert len(charge.attempts) >= 2, charge.attempts
    charges = sim.ledger(order_id=str(order_id))["effects"]["charges"]
    assert len(charges) == 1, charges
    ours = [e for e in events if e.order_id == order_id]
    assert ours, "the order's events are on the feed"
    assert len({e.event_id for e in ours}) == len(ours)
    assert len({e.seq for e in ours}) == len(ours)
    # The attempt whose intent was committed unheard is an outcome unknown (it may have
    # charged): the order waits on the payment's status, never treats it as failed.
    types = Counter(e.type for e in ours)
    assert types["order.payment_unknown"] == 1, types
    assert types["order.paid"] == 1, types


def test_a_create_whose_commit_answer_is_lost_is_answered_unavailable_and_replays_once(
    proxy: PausableProxy, pg_url: str, run: Run[Any]
) -> None:
    clock = FakeClock()

    async def scenario() -> tuple[UUID, UUID]:
        async with (
            PgOrderStore.open(pg_url, max_size=4) as direct,
            PgOrderStore.open(proxy.url(pg_url), min_size=1, max_size=4) as store,
        ):
            service = OrderService(store, clock, InMemoryUsers())
            proxy.lose_reply_to(WRITE)
            with pytest.raises(StoreUnavailable):
                await service.create_order(CUSTOMER, "lost-create", [Item("sku", 1, 900)], "RUB")
            # The client was told 503 (safe to repeat with the same key) and repeats.
            view, _ = await service.create_order(
                CUSTOMER, "lost-create", [Item("sku", 1, 900)], "RUB"
            )
            again, _ = await service.create_order(
                CUSTOMER, "lost-create", [Item("sku", 1, 900)], "RUB"
            )
            stored = await direct.load(view.aggregate.order.order_id)
            assert stored is not None
            return view.aggregate.order.order_id, again.aggregate.order.order_id

    first, second = run(scenario())
    assert proxy.replies_lost == 1
    assert first == second, "the repeat is answered with the order the lost commit created"
    with psycopg.connect(pg_url) as conn:
        [(orders,)] = conn.execute(ORDER_COUNT).fetchall()
    assert orders == 1, "one order, neither lost nor made twice"
