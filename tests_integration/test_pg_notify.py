"""The NOTIFY that wakes idle executors: sent for a step due when it appears, or put back to
pending; not for a timer due later (whose wake-up would only cost an empty claim)."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

import attrs
import psycopg
import pytest
from builders import T0, audit, creation, new_order, new_step
from conftest import Run

from orderflow_core.model import Change, OrderAggregate
from orderflow_core.states import StepStatus
from orderflow_pg import PgOrderStore, PgWakeUps

pytestmark = pytest.mark.postgres

CHANNEL = "orderflow_steps"
MARKER = "marker"


def _until_marker(pg_url: str, listener: psycopg.Connection[Any]) -> list[str]:
    """Send a marker, then return every payload received up to it: what the action before
    announced shows before the marker, and an action that announced nothing shows as the
    marker alone (no waiting for something not to happen)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, MARKER))
    payloads = []
    for notice in listener.notifies(timeout=10):
        payloads.append(notice.payload)
        if notice.payload == MARKER:
            return payloads
    raise AssertionError(f"the marker did not arrive within 10 s; got {payloads}")


def test_a_step_due_now_wakes_the_executors_and_a_timer_due_later_does_not(
    pg_store: PgOrderStore, pg_url: str, run: Run[Any]
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")

        run(pg_store.create(creation(new_order(), key=None, due=T0)))
        assert _until_marker(pg_url, listener) == ["", MARKER], "the due step was announced"

        later = T0 + timedelta(minutes=15)
        timer_order = new_order()
        run(pg_store.create(creation(timer_order, key=None, due=later)))
        assert _until_marker(pg_url, listener) == [MARKER], "a step due later is not announced"

        claims = run(pg_store.claim_due(owner="A", now=later, limit=10, lease_s=30))
        [claim] = [c for c in claims if c.order_id == timer_order.order_id]

        def back_to_pending(aggregate: OrderAggregate) -> tuple[Change, None]:
            step = aggregate.step(claim.step_id)
            assert step is not None
            return Change(steps=(attrs.evolve(step, status=StepStatus.PENDING),)), None

        run(pg_store.update(timer_order.order_id, back_to_pending))  # as an operator's retry
        assert _until_marker(pg_url, listener) == ["", MARKER], "back to pending is announced"


def test_a_group_commit_of_orders_with_due_steps_sends_one_wake_up(
    pg_store: PgOrderStore, pg_url: str, run: Run[Any]
) -> None:
    orders = [new_order() for _ in range(3)]
    for order in orders:
        run(pg_store.create(creation(order, key=None, due=T0 + timedelta(minutes=15))))
    with psycopg.connect(pg_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")

        def due_now(aggregate: OrderAggregate) -> tuple[Change, None]:
            [step] = aggregate.steps
            return Change(
                steps=(
                    attrs.evolve(step, status=StepStatus.CANCELLED),
                    new_step(aggregate.order, seq=2),
                )
            ), None

        run(pg_store.update_many([(o.order_id, due_now) for o in orders]))
        assert _until_marker(pg_url, listener) == ["", MARKER], "one wake-up for the batch"

        def nothing_due(aggregate: OrderAggregate) -> tuple[Change, None]:
            return Change(audit=(audit(aggregate.order, "noted"),)), None

        run(pg_store.update_many([(o.order_id, nothing_due) for o in orders]))
        assert _until_marker(pg_url, listener) == [MARKER], "nothing due, nobody woken"


def test_the_wake_up_port_wakes_on_a_created_due_step_and_rides_out_a_lost_connection(
    pg_store: PgOrderStore, pg_url: str, run: Run[Any]
) -> None:
    """`PgWakeUps.listen` (what a worker runs beside its executor) calls `wake` for a step
    made due, and after its connection is killed it listens again on a new one."""

    async def scenario() -> int:
        woken = asyncio.Event()
        wakeups = PgWakeUps(pg_url, reconnect_s=0.05)
        listening = asyncio.create_task(wakeups.listen(woken.set))
        try:
            for round_ in range(2):
                woken.clear()
                async with asyncio.timeout(10):  # created until announced (LISTEN may lag)
                    while not woken.is_set():
                        await pg_store.create(creation(new_order(), key=None, due=T0))
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(0.2):
                                await woken.wait()
                if round_ == 0:
                    async with await psycopg.AsyncConnection.connect(
                        pg_url, autocommit=True
                    ) as admin:
                        cursor = await admin.execute(KILL_LISTENERS)
                        killed = len(await cursor.fetchall())
            return killed
        finally:
            listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listening

    assert run(scenario()) == 1, "one listening connection was killed, then woken again"


KILL_LISTENERS = """
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND starts_with(query, 'LISTEN ')
"""
