"""Failover under load on a real Patroni cluster (etcd + two PostgreSQL 15 nodes, synchronous
replication; `bench.ha_cluster`), with `orderflow serve` on a multi-host connection string
(`target_session_attrs=read-write`) and customers posting orders all along.

Each scenario injects one fault, then checks the invariants: every accepted order exists and
ends (shipped), at most one charge per order in the simulated payment ledger, every event once
on the feed and on NATS JetStream, no client 500 — a client sees at most 503 with Retry-After,
and repeats with the same Idempotency-Key. It prints what the failover cost: seconds until
orders flowed again, 503s seen, orders lost (must be 0). Skipped where Patroni, etcd or
PostgreSQL 15 are missing.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import attrs
import psycopg
import pytest
from nats_harness import Names, any_nats_server, consume_all, delete_stream
from processes import CUSTOMER_TOKEN, Proc, base_env, eventually, free_port
from psycopg import sql

from bench import ha_cluster
from orderflow_core.relay import OutboxRelay
from orderflow_core.testing import FakeClock
from orderflow_pg import PgOrderStore
from tests_core.rules import check_snapshot, take_snapshot

# Not `postgres`: the cluster is its own PostgreSQL, so CI's second pass (the embedded server,
# `-m postgres`) does not run these again.
pytestmark = pytest.mark.slow
CLIENTS = 4
LOAD_BEFORE_S = 3.0
LOAD_AFTER_S = 4.0
DEADLINE_S = 3.0
STANDBY_GONE_S = 5.0
ORDER = {"items": [{"sku": "a", "quantity": 1, "unit_price_minor": 100}], "currency": "RUB"}
RESULTS = Path("/tmp/orderflow-ha-failover.jsonl")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ha_cluster.HaCluster]:
    why = ha_cluster.available()
    if why is not None:
        pytest.skip(why)
    directory = Path("/var/tmp") / f"orderflow-ha-{tmp_path_factory.getbasetemp().name}"
    with ha_cluster.HaCluster(directory) as running:
        yield running


@pytest.fixture(scope="module")
def nats_url(cluster: ha_cluster.HaCluster) -> Iterator[str]:
    with any_nats_server() as url:
        yield url


@attrs.define
class Posting:
    """Customers posting orders in closed loop, each repeating a refused POST with its key."""

    api: str
    accepted: dict[str, str] = attrs.Factory(dict)  # key -> order id
    statuses: Counter[int] = attrs.Factory(Counter)
    without_retry_after: int = 0
    slowest_s: float = 0.0
    accepted_at: list[float] = attrs.Factory(list)
    refused_at: list[float] = attrs.Factory(list)
    stop: threading.Event = attrs.Factory(threading.Event)
    lock: threading.Lock = attrs.Factory(threading.Lock)

    def post(self, key: str) -> tuple[int, Any]:
        request = urllib.request.Request(
            f"{self.api}/api/v1/orders",
            data=json.dumps(ORDER).encode(),
            method="POST",
            headers={
                "Authorization": f"Bearer {CUSTOMER_TOKEN}",
                "Idempotency-Key": key,
                "Content-Type": "application/json",
            },
        )
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                status, body, headers = reply.status, json.loads(reply.read()), reply.headers
        except urllib.error.HTTPError as error:
            status, body, headers = error.code, json.loads(error.read() or b"null"), error.headers
        with self.lock:
            self.slowest_s = max(self.slowest_s, time.monotonic() - started)
            self.statuses[status] += 1
            if status == 503:
                self.refused_at.append(time.monotonic())
                self.without_retry_after += headers.get("Retry-After") is None
        return status, body

    def customer(self, n: int) -> None:
        count = 0
        while not self.stop.is_set():
            key = f"ha-{n}-{count}"
            while True:  # the same key until accepted: a 503 is safe to repeat
                status, body = self.post(key)
                if status in (200, 201, 202):
                    with self.lock:
                        self.accepted[key] = body["order_id"]
                        self.accepted_at.append(time.monotonic())
                    break
                assert status == 503, (status, body)
                time.sleep(0.1)  # the client's back-off (shorter than Retry-After, to measure)
            count += 1


def _database(cluster: ha_cluster.HaCluster, name: str) -> str:
    leader = cluster.leader()
    assert leader is not None
    with psycopg.connect(cluster.node_url(leader), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return cluster.url(name)


def _ledger(mocks_port: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{mocks_port}/_control/ledger"
    with urllib.request.urlopen(url, timeout=10) as reply:
        return dict(json.loads(reply.read()))


async def _all_ended(url: str, order_ids: list[UUID]) -> bool:
    async with PgOrderStore.open(url, max_size=2) as store:
        for order_id in order_ids:
            aggregate = await store.load(order_id)
            if aggregate is None or not aggregate.order.is_terminal:
                return False
        return not await store.unpublished_events(1)


async def _check(
    url: str, order_ids: list[UUID], effects: dict[str, Any], nats_url: str, names: Names
) -> int:
    async with PgOrderStore.open(url, max_size=2) as store:
        relay = OutboxRelay(store, FakeClock())
        while await relay.run_once():
            pass
        snap = await take_snapshot(store, order_ids, effects)
    check_snapshot(snap)
    shipped = sum(1 for r in snap.orders if r.aggregate.order.state.value == "shipped")
    events = [(e.order_id, e.seq) for e in snap.events]
    assert len(set(events)) == len(events), "an event twice on the feed"
    on_nats = Counter(m.body["event_id"] for m in await consume_all(nats_url, names))
    assert set(on_nats.values()) == {1}, "an event twice on NATS"
    assert set(on_nats) == {str(e.event_id) for e in snap.events}, "NATS and the feed differ"
    return shipped


def _primary_killed(cluster: ha_cluster.HaCluster) -> Callable[[], None]:
    leader = cluster.leader()
    assert leader is not None
    leader.kill()  # Patroni and the postmaster SIGKILLed: the machine died
    return leader.start  # brought back afterwards: it rejoins as a standby


def _postmaster_killed(cluster: ha_cluster.HaCluster) -> Callable[[], None]:
    leader = cluster.leader()
    assert leader is not None
    leader.kill_postmaster()  # Patroni lives on: it restarts the node or fails over
    return lambda: None


def _switchover(cluster: ha_cluster.HaCluster) -> Callable[[], None]:
    cluster.switchover()
    return lambda: None


def _two_failovers(cluster: ha_cluster.HaCluster) -> Callable[[], None]:
    first = cluster.leader()
    assert first is not None
    first.kill()
    eventually(lambda: cluster.leader() not in (None, first), timeout_s=60, what="first failover")
    first.start()
    cluster.wait_healthy()
    second = cluster.leader()
    assert second is not None
    second.kill()
    return second.start


def _standby_killed_strict(cluster: ha_cluster.HaCluster) -> Callable[[], None]:
    cluster.set_strict(True)
    standby = cluster.standby()
    assert standby is not None
    standby.kill()  # with synchronous_mode_strict the primary's commits wait for a standby
    time.sleep(STANDBY_GONE_S)  # how long the standby stays dead (a schedule, not a wait)
    standby.start()
    return lambda: cluster.set_strict(False)


FAULTS = {
    "primary_killed": _primary_killed,
    "primary_postmaster_killed": _postmaster_killed,
    "switchover": _switchover,
    "two_failovers": _two_failovers,
    "standby_killed_strict": _standby_killed_strict,
}


@pytest.fixture
def names(nats_url: str) -> Iterator[Names]:
    """A stream of this test's own, deleted after it (the machine's NATS server outlives runs)."""
    names = Names.unique()
    yield names
    asyncio.run(delete_stream(nats_url, names))


@pytest.mark.parametrize("fault", list(FAULTS))
def test_orders_survive_a_failover_under_load(
    cluster: ha_cluster.HaCluster, nats_url: str, names: Names, fault: str, procs: list[Proc]
) -> None:
    cluster.wait_healthy()
    url = _database(cluster, f"orderflow_ha_{fault}")
    mocks_port = free_port()
    env = base_env(
        ORDERFLOW_NATS_URL=nats_url,
        ORDERFLOW_NATS_STREAM=names.stream,
        ORDERFLOW_NATS_SUBJECT_PREFIX=names.prefix,
        ORDERFLOW_DATABASE_URL=url,
        ORDERFLOW_HTTP_PORT="0",
        ORDERFLOW_MOCKS_PORT=str(mocks_port),
        ORDERFLOW_WORKER_ID="worker-ha",
        ORDERFLOW_LEASE_S="3",
        ORDERFLOW_HEARTBEAT_S="1",
        ORDERFLOW_RETRY_DELAYS_S="0.2,0.4,0.8,1.6",
        ORDERFLOW_POLL_INTERVAL_S="0.2",
        ORDERFLOW_PROCESS_VERSION="1",
        ORDERFLOW_REQUEST_DEADLINE_S=str(DEADLINE_S),
    )
    proc = Proc("serve", env)
    procs.append(proc)
    api = proc.wait_for(r"orderflow API: (http://\S+)/api/v1", timeout_s=120).group(1)
    posting = Posting(api)
    customers = [threading.Thread(target=posting.customer, args=(n,)) for n in range(CLIENTS)]
    for thread in customers:
        thread.start()
    try:
        time.sleep(LOAD_BEFORE_S)  # load before the fault (a schedule, not a wait)
        faulted_at = time.monotonic()
        bring_back = FAULTS[fault](cluster)
        eventually(
            lambda: sum(t > faulted_at + 1 for t in posting.accepted_at) >= 20,
            timeout_s=120,
            what="orders accepted again after the fault",
        )
        time.sleep(LOAD_AFTER_S)  # load after the recovery (a schedule, not a wait)
    finally:
        posting.stop.set()
        for thread in customers:
            thread.join(timeout=60)
    order_ids = [UUID(o) for o in posting.accepted.values()]
    eventually(
        lambda: asyncio.run(_all_ended(url, order_ids)),
        timeout_s=120,
        what="every accepted order ended",
    )
    effects = _ledger(mocks_port)["effects"]
    shipped = asyncio.run(_check(url, order_ids, effects, nats_url, names))
    charges = Counter(c["order_id"] for c in effects["charges"])
    assert proc.terminate() == 0
    bring_back()
    cluster.wait_healthy()
    # Orders flow again: the first order accepted after the last 503 (or after the fault).
    last_refusal = max((t for t in posting.refused_at if t > faulted_at), default=faulted_at)
    flowing_again = min(t for t in posting.accepted_at if t > last_refusal)
    recovery_s = flowing_again - faulted_at
    figures = {
        "fault": fault,
        "orders_accepted": len(order_ids),
        "orders_shipped": shipped,
        "orders_lost": len(order_ids) - shipped,
        "most_charges_per_order": max(charges.values(), default=0),
        "statuses": dict(posting.statuses),
        "client_503": posting.statuses[503],
        "client_500": posting.statuses[500],
        "slowest_request_s": round(posting.slowest_s, 2),
        "orders_flow_again_after_s": round(recovery_s, 1),
    }
    print(f"\nfailover figures: {json.dumps(figures)}")
    with RESULTS.open("a") as out:
        out.write(json.dumps(figures) + "\n")
    assert shipped == len(order_ids), "every accepted order shipped"
    assert max(charges.values(), default=0) == 1
    assert posting.statuses[500] == 0
    assert posting.without_retry_after == 0
    assert set(posting.statuses) <= {200, 201, 202, 503}, posting.statuses
