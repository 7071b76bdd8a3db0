"""A worker partitioned from PostgreSQL — not dead, not frozen: its link cut mid-call — loses
its lease; another worker takes the step over; when the link returns, the partitioned
worker's late commit is refused and audited.

The partitioned worker is a real `orderflow worker` process in a network namespace of its
own (a veth pair to the root namespace). PostgreSQL and the simulated services listen on
127.0.0.1 only, so the worker reaches them through forwarders in the root namespace bound to
the veth address; the link to the database is cut by stopping its forwarder, mid-call, and
restored once the other worker owns the step. Needs root and `ip netns`; skipped elsewhere.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import attrs
import psycopg
import pytest
from conftest import Run
from processes import Proc, base_env, eventually, free_port, http
from tcp_proxy import PausableProxy

from orderflow_core import Executor, Item, OrderService, Principal, Role, SystemClock
from orderflow_core.context import Timing
from orderflow_core.model import Claim
from orderflow_core.ports import Services
from orderflow_core.states import StepKind
from orderflow_http import HttpPayments, HttpShipping, HttpWarehouse
from orderflow_pg import PgOrderStore

pytestmark = pytest.mark.postgres
# The partitioned worker's timing: the call (1.5 s at the simulated services) ends before the
# 2 s call deadline, which ends before the first heartbeat (2.2 s) and the lease (2.5 s) — so
# no renewal is attempted, and the result's commit is in flight when the link is cut.
LEASE_S, HEARTBEAT_S, CALL_TIMEOUT_S, LATENCY_MS = "2.5", "2.2", "2", "1500"
PARTITIONED = "worker-partitioned"


@attrs.frozen
class Namespace:
    name: str
    host_ip: str  # the root namespace's end of the veth pair
    ns_ip: str

    @property
    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@pytest.fixture
def netns() -> Iterator[Namespace]:
    """A network namespace joined to the root one by a veth pair; removed afterwards."""
    if shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("network namespaces need root and iproute2 (`ip netns`)")
    tag = secrets.token_hex(3)
    name, host_if, ns_if = f"orderflow-{tag}", f"ofh{tag}", f"ofn{tag}"
    octet = int(tag[:2], 16)
    host_ip, ns_ip = f"10.213.{octet}.1", f"10.213.{octet}.2"
    try:
        _ip("netns", "add", name)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"`ip netns add` is not permitted here: {exc.stderr.strip()}")
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if, "netns", name)
        _ip("addr", "add", f"{host_ip}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("-n", name, "addr", "add", f"{ns_ip}/30", "dev", ns_if)
        _ip("-n", name, "link", "set", ns_if, "up")
        _ip("-n", name, "link", "set", "lo", "up")
        yield Namespace(name, host_ip, ns_ip)
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def _rows(url: str, query: str, **params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(query, params).fetchall()


async def _create_order(url: str) -> UUID:
    async with PgOrderStore.open(url) as store:
        service = OrderService(store, SystemClock(), store.users)
        customer = Principal("order_customer", Role.CUSTOMER)
        view, _ = await service.create_order(customer, "partition-1", [Item("sku", 1, 100)], "RUB")
        return view.aggregate.order.order_id


def test_a_partitioned_worker_loses_its_lease_and_its_late_commit_is_refused_and_audited(
    netns: Namespace, procs: list[Proc], pg_url: str, run: Run[Any]
) -> None:
    mocks_port = free_port()
    mocks = Proc(
        "mocks",
        base_env(ORDERFLOW_MOCKS_PORT=str(mocks_port), ORDERFLOW_MOCKS_LATENCY_MS=LATENCY_MS),
    )
    procs.append(mocks)
    mocks.wait_for("listening")
    mocks_url = f"http://127.0.0.1:{mocks_port}"

    with (
        PausableProxy.to_database(pg_url, listen_host=netns.host_ip) as db_link,
        PausableProxy("127.0.0.1", mocks_port, listen_host=netns.host_ip) as services_link,
    ):
        via_link = f"http://{netns.host_ip}:{services_link.port}"
        partitioned = Proc(
            "worker",
            base_env(
                ORDERFLOW_DATABASE_URL=db_link.url(pg_url),
                ORDERFLOW_WAREHOUSE_URL=via_link,
                ORDERFLOW_PAYMENTS_URL=via_link,
                ORDERFLOW_SHIPPING_URL=via_link,
                ORDERFLOW_WORKER_ID=PARTITIONED,
                ORDERFLOW_LEASE_S=LEASE_S,
                ORDERFLOW_HEARTBEAT_S=HEARTBEAT_S,
                ORDERFLOW_CALL_TIMEOUT_S=CALL_TIMEOUT_S,
            ),
            prefix=netns.exec_prefix,
        )
        procs.append(partitioned)
        partitioned.wait_for(f"orderflow worker {PARTITIONED} running", timeout_s=120)
        order_id = run(_create_order(pg_url))

        # The partitioned worker has recorded its intent and is calling the warehouse: cut it
        # off from the database now, mid-call.
        intent = (
            "SELECT s.step_id, a.attempt FROM step_attempts a JOIN workflow_steps s USING (step_id)"
            " WHERE s.order_id = %(order_id)s AND a.worker = %(worker)s AND a.finished_at IS NULL"
        )
        eventually(
            lambda: bool(_rows(pg_url, intent, order_id=order_id, worker=PARTITIONED)),
            timeout_s=30,
            what="the partitioned worker's intent",
        )
        db_link.pause()
        [(step_id, attempt)] = _rows(pg_url, intent, order_id=order_id, worker=PARTITIONED)
        assert attempt == 1

        # Another worker takes the step over once the lease ran out; as soon as it owns the
        # step (its intent committed, its call about to go out), the link comes back and the
        # partitioned worker's commit, held all along, reaches the database.
        async def restore_link(name: str, claim: Claim) -> None:
            if name == "before_call" and claim.step_id == step_id:
                db_link.resume()

        async def take_over() -> int:
            async with (
                PgOrderStore.open(pg_url) as store,
                HttpWarehouse(mocks_url) as warehouse,
                HttpPayments(mocks_url) as payments,
                HttpShipping(mocks_url) as shipping,
            ):
                other = Executor(
                    store=store,
                    services=Services(warehouse, payments, shipping),
                    clock=SystemClock(),
                    worker_id="worker-other",
                    timing=Timing(lease_s=30.0),
                    checkpoint=restore_link,
                )
                started = time.monotonic()
                while not await other.run_once(limit=1):
                    assert time.monotonic() - started < 30, "nobody took the step over"
                    await asyncio.sleep(0.05)  # a polling interval, not a wait for a condition
                return 1

        run(take_over())

        rejected = (
            "SELECT action, outcome FROM audit_log"
            " WHERE order_id = %(order_id)s AND step_id = %(step_id)s AND actor = %(worker)s"
        )
        eventually(
            lambda: bool(
                _rows(pg_url, rejected, order_id=order_id, step_id=step_id, worker=PARTITIONED)
            ),
            timeout_s=30,
            what="the late commit's rejection in the audit log",
        )
        entries = _rows(pg_url, rejected, order_id=order_id, step_id=step_id, worker=PARTITIONED)
        assert any("reject" in action or outcome == "rejected" for action, outcome in entries)

        # Nothing of the partitioned worker's result was stored; the other worker's was.
        attempts = _rows(
            pg_url,
            "SELECT attempt, worker, outcome FROM step_attempts WHERE step_id = %(step_id)s"
            " ORDER BY attempt",
            step_id=step_id,
        )
        assert [(a, w) for a, w, _ in attempts] == [(1, PARTITIONED), (2, "worker-other")]
        assert attempts[0][2] in (None, "abandoned")
        assert attempts[1][2] == "succeeded"
        kind = _rows(pg_url, "SELECT kind FROM workflow_steps WHERE step_id = %(s)s", s=step_id)
        assert kind == [(StepKind.RESERVE.value,)]
        status, ledger = http("GET", f"{mocks_url}/_control/ledger?order_id={order_id}")
        assert status == 200
        assert len(ledger["effects"]["reservations"]) == 1  # both calls, one key, one effect
        assert partitioned.terminate() == 0
