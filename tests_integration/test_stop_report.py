"""SIGTERM that abandons in-flight steps says how many were left to lease expiry and by when
they will be retried — and another worker does retry them then (real processes)."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime

import psycopg
import pytest
from processes import Proc, base_env, eventually, free_port

from orderflow_core import Item, OrderService, Principal, Role, SystemClock
from orderflow_pg import PgOrderStore

pytestmark = pytest.mark.postgres
ORDERS = 4
STOPPED = re.compile(
    r"orderflow worker worker-a stopped: (\d+) in-flight steps? did not finish within "
    r"ORDERFLOW_SHUTDOWN_GRACE_S=0.1 s and (?:was|were) left to lease expiry; .* once their "
    r"leases run out, by (\S+Z) \(ORDERFLOW_LEASE_S=4 s\)"
)


def _create_orders(url: str) -> None:
    async def create() -> None:
        async with PgOrderStore.open(url) as store:
            service = OrderService(store, SystemClock(), store.users)
            customer = Principal("order_customer", Role.CUSTOMER)
            for n in range(ORDERS):
                await service.create_order(customer, f"stop-{n}", [Item("sku", 1, 100)], "RUB")

    asyncio.run(create())


def _rows(url: str, query: str, **params: object) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(query, params).fetchall()


def test_sigterm_says_how_many_steps_were_left_to_lease_expiry_and_when_they_are_retried(
    procs: list[Proc], pg_url: str
) -> None:
    mocks_port = free_port()
    # Every call takes 2 s (under the 3 s call deadline): a step is in flight when SIGTERM comes.
    mocks = Proc(
        "mocks", base_env(ORDERFLOW_MOCKS_PORT=str(mocks_port), ORDERFLOW_MOCKS_LATENCY_MS="2000")
    )
    procs.append(mocks)
    mocks.wait_for("listening")
    _create_orders(pg_url)

    def worker(name: str, **extra: str) -> Proc:
        env = base_env(
            ORDERFLOW_DATABASE_URL=pg_url,
            ORDERFLOW_MOCKS_PORT=str(mocks_port),
            ORDERFLOW_WORKER_ID=name,
            **extra,
        )
        proc = Proc("worker", env)
        procs.append(proc)
        return proc

    first = worker(
        "worker-a",
        ORDERFLOW_SHUTDOWN_GRACE_S="0.1",
        ORDERFLOW_LEASE_S="4",
        ORDERFLOW_HEARTBEAT_S="1",
    )
    in_flight = "SELECT count(*) FROM step_attempts WHERE finished_at IS NULL"
    eventually(
        lambda: _rows(pg_url, in_flight)[0][0] >= ORDERS, what="every order's step in flight"
    )
    assert first.terminate() == 0
    said = first.wait_for(STOPPED.pattern, timeout_s=5)
    left, retry_by = int(said.group(1)), datetime.fromisoformat(said.group(2))
    running = _rows(
        pg_url,
        "SELECT step_id, lease_expires_at FROM workflow_steps"
        " WHERE status = 'running' AND lease_owner = 'worker-a'",
    )
    assert left == len(running) == ORDERS
    assert all(expires <= retry_by for _, expires in running), (running, retry_by)

    second = worker("worker-b")
    shipped = "SELECT count(*) FROM orders WHERE state = 'shipped'"
    eventually(lambda: _rows(pg_url, shipped)[0][0] == ORDERS, timeout_s=120, what="all shipped")
    for step_id, expired_at in running:
        [(attempt, started)] = _rows(
            pg_url,
            "SELECT attempt, started_at FROM step_attempts"
            " WHERE step_id = %(step_id)s AND worker = 'worker-b' ORDER BY attempt LIMIT 1",
            step_id=step_id,
        )
        assert attempt == 2  # the next generation, once the abandoned lease ran out
        assert started >= expired_at
    assert second.terminate() == 0
    second.wait_for("orderflow worker worker-b stopped: every in-flight step finished", 5)
