"""The real command line: serve on the embedded database, workers sharing work, SIGTERM,
bad configuration, and a restart after SIGKILL."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import psycopg
import pytest
from processes import (
    CUSTOMER_TOKEN,
    Proc,
    base_env,
    eventually,
    free_port,
    http,
)

from orderflow_core import Item, OrderService, Principal, Role, SystemClock
from orderflow_pg import PgOrderStore

pytestmark = pytest.mark.postgres
AUTH = {"Authorization": f"Bearer {CUSTOMER_TOKEN}"}
ORDER = {"items": [{"sku": "book", "quantity": 1, "unit_price_minor": 990}], "currency": "RUB"}


def _serve(procs: list[Proc], home: Path) -> tuple[Proc, str]:
    env = base_env(
        ORDERFLOW_HOME=str(home), ORDERFLOW_HTTP_PORT="0", ORDERFLOW_MOCKS_PORT=str(free_port())
    )
    proc = Proc("serve", env)
    procs.append(proc)
    api = proc.wait_for(r"orderflow API: (http://\S+)/api/v1", timeout_s=120).group(1)
    eventually(lambda: http("GET", f"{api}/readyz")[0] == 200, what="/readyz")
    return proc, api


def _state(api: str, order_id: str) -> str:
    status, body = http("GET", f"{api}/api/v1/orders/{order_id}", **AUTH)
    assert status == 200, body
    return str(body["state"])


def test_serve_on_the_embedded_database_becomes_ready_and_ships_an_order(
    procs: list[Proc], tmp_path: Path
) -> None:
    proc, api = _serve(procs, tmp_path / "home")
    status, order = http(
        "POST", f"{api}/api/v1/orders", ORDER, **AUTH, **{"Idempotency-Key": "cli-1"}
    )
    assert status == 202
    eventually(lambda: _state(api, order["order_id"]) == "shipped", what="shipped")
    assert proc.terminate() == 0


def test_a_restart_after_sigkill_reuses_the_embedded_database(
    procs: list[Proc], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    first, api = _serve(procs, home)
    _, order = http("POST", f"{api}/api/v1/orders", ORDER, **AUTH, **{"Idempotency-Key": "k"})
    eventually(lambda: _state(api, order["order_id"]) == "shipped", what="shipped")
    first.kill()
    second, api = _serve(procs, home)
    assert _state(api, order["order_id"]) == "shipped"
    assert second.terminate() == 0
    pid_file = home / "pgdata" / "postmaster.pid"
    eventually(lambda: not pid_file.exists(), timeout_s=30, what="embedded server stopped")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ORDERFLOW_LEASE_S", "soon"),
        ("ORDERFLOW_HTTP_PORT", "99999"),
        ("ORDERFLOW_RETRY_DELAYS_S", "1,x"),
        ("ORDERFLOW_PAYMENTS_URL", "ftp://pay"),
        ("ORDERFLOW_MAX_CONCURRENT_STEPS", "0"),
        ("ORDERFLOW_HEARTBEAT_S", "45"),
        ("ORDERFLOW_TOKEN_CACHE_S", "-1"),
        ("ORDERFLOW_PROCESS_VERSION", "3"),
    ],
)
def test_a_bad_configuration_value_stops_start_up_with_one_line_naming_it(
    procs: list[Proc], variable: str, value: str
) -> None:
    proc = Proc("serve", base_env(**{variable: value}))
    procs.append(proc)
    assert proc.popen.wait(timeout=60) == 2
    line = proc.wait_for(variable, timeout_s=5).string
    assert line.startswith("orderflow: configuration error:")
    assert len([x for x in proc.lines if x.strip()]) == 1


def _create_orders(url: str, count: int) -> list[uuid.UUID]:
    async def create() -> list[uuid.UUID]:
        async with PgOrderStore.open(url) as store:
            # Version 1: three steps per order (the attempt count below).
            service = OrderService(store, SystemClock(), store.users, process_version=1)
            customer = Principal("order_customer", Role.CUSTOMER)
            ids = []
            for n in range(count):
                view, _ = await service.create_order(
                    customer, f"bulk-{n}", [Item("sku", 1, 100)], "RUB"
                )
                ids.append(view.aggregate.order.order_id)
            return ids

    return asyncio.run(create())


def _count(url: str, query: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(query).fetchone()
        assert row is not None
        return int(row[0])


def _worker_env(url: str, mocks_port: int, worker_id: str, **extra: str) -> dict[str, str]:
    return base_env(
        ORDERFLOW_DATABASE_URL=url,
        ORDERFLOW_MOCKS_PORT=str(mocks_port),
        ORDERFLOW_WORKER_ID=worker_id,
        **extra,
    )


def test_two_workers_share_the_steps_of_a_hundred_orders(procs: list[Proc], pg_url: str) -> None:
    mocks_port = free_port()
    mocks = Proc("mocks", base_env(ORDERFLOW_MOCKS_PORT=str(mocks_port)))
    procs.append(mocks)
    mocks.wait_for("listening")
    _create_orders(pg_url, 100)
    procs.extend(
        Proc("worker", _worker_env(pg_url, mocks_port, name, ORDERFLOW_MAX_CONCURRENT_STEPS="5"))
        for name in ("worker-a", "worker-b")
    )
    shipped = "SELECT count(*) FROM orders WHERE state = 'shipped'"
    eventually(lambda: _count(pg_url, shipped) == 100, timeout_s=120, what="100 shipped")
    for name in ("worker-a", "worker-b"):
        ran = _count(pg_url, f"SELECT count(*) FROM step_attempts WHERE worker = '{name}'")
        assert ran > 0, f"{name} ran no step"
    assert _count(pg_url, "SELECT count(*) FROM step_attempts") == 300
    for proc in procs[1:]:
        assert proc.terminate() == 0


def test_sigterm_finishes_in_flight_steps_and_exits_zero(procs: list[Proc], pg_url: str) -> None:
    mocks_port = free_port()
    mocks = Proc(
        "mocks", base_env(ORDERFLOW_MOCKS_PORT=str(mocks_port), ORDERFLOW_MOCKS_LATENCY_MS="300")
    )
    procs.append(mocks)
    mocks.wait_for("listening")
    _create_orders(pg_url, 20)
    worker = Proc("worker", _worker_env(pg_url, mocks_port, "worker-t"))
    procs.append(worker)
    started = "SELECT count(*) FROM step_attempts"
    eventually(lambda: _count(pg_url, started) >= 5, what="steps in flight")
    assert worker.terminate() == 0
    live = (
        "SELECT count(*) FROM workflow_steps WHERE status = 'running' AND lease_owner = 'worker-t'"
    )
    assert _count(pg_url, live) == 0
    unfinished = "SELECT count(*) FROM step_attempts WHERE finished_at IS NULL"
    assert _count(pg_url, unfinished) == 0
