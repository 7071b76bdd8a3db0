"""Chaos with real processes: 3 `orderflow worker` processes on one PostgreSQL database, the
simulated services (on a thread of this process, reached over HTTP) with random per-order
faults scripted through the control API, 300 orders, and a random worker SIGKILLed every
0.5–1.5 s and restarted, for 30 s. Then the killing stops, the work drains, and every rule holds.

`ORDERFLOW_CHAOS_SEED` replays a run; the seed and the figures are printed (`-s` shows them).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import pytest
from processes import Proc, base_env

from orderflow_core import Item, OrderService, StepStatus, SystemClock
from orderflow_core.states import DUE_STATUSES
from orderflow_core.testing import InMemoryUsers
from orderflow_mocks import running_mocks
from orderflow_pg import PgOrderStore
from tests_core.rules import check_snapshot, take_snapshot
from tests_core.world import CUSTOMER

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ORDERS = 300
WORKERS = 3
CHAOS_S = 30.0
DRAIN_S = 90.0
FAULTS = {
    ("warehouse", "reserve"): ["transient", "timeout", "lost_response", "permanent"],
    ("warehouse", "release"): ["transient", "timeout", "lost_response"],
    ("payments", "charge"): ["transient", "timeout", "lost_response", "permanent", "pending"],
    ("payments", "status"): ["transient", "timeout"],
    ("shipping", "ship"): ["transient", "timeout", "lost_response", "permanent"],
}


def _http(url: str, body: object | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())


@pytest.fixture
def mocks_url() -> Iterator[str]:
    """The simulated services on their own thread and loop, as a separate server would be."""
    started: list[tuple[str, asyncio.AbstractEventLoop, asyncio.Event]] = []
    ready = threading.Event()

    async def serve() -> None:
        stop = asyncio.Event()
        async with running_mocks(hold_s=1.0) as mocks:
            started.append((mocks.url, asyncio.get_running_loop(), stop))
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
    thread.start()
    assert ready.wait(10), "the simulated services did not start"
    url, loop, stop = started[0]
    try:
        yield url
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)


async def _create_orders(url: str, rng: random.Random) -> list[UUID]:
    async with PgOrderStore.open(url, max_size=4) as store:
        service = OrderService(store, SystemClock(), InMemoryUsers())
        ids = []
        for n in range(ORDERS):
            items = [Item(f"sku-{rng.randint(1, 9)}", rng.randint(1, 3), rng.randint(100, 9000))]
            view, _ = await service.create_order(CUSTOMER, f"chaos-{n}", items, "RUB")
            ids.append(view.aggregate.order.order_id)
        return ids


def _script_faults(mocks: str, order_ids: list[UUID], rng: random.Random) -> int:
    scripted = 0
    for order_id in order_ids:
        for (service, operation), kinds in FAULTS.items():
            if rng.random() < 0.3:
                outcomes = [rng.choice(kinds) for _ in range(rng.randint(1, 2))]
                script = {"service": service, "operation": operation, "outcomes": outcomes}
                _http(f"{mocks}/_control/scripts", {**script, "order_id": str(order_id)})
                scripted += len(outcomes)
    return scripted


def _worker(env: dict[str, str], index: int, generation: int) -> Proc:
    return Proc("worker", {**env, "ORDERFLOW_WORKER_ID": f"worker-{index}-{generation}"})


async def _settled(url: str, order_ids: list[UUID]) -> tuple[bool, Counter[str]]:
    now = datetime.now(UTC)
    async with PgOrderStore.open(url, max_size=2) as store:
        states: Counter[str] = Counter()
        done = True
        for order_id in order_ids:
            aggregate = await store.load(order_id)
            assert aggregate is not None
            waiting = aggregate.order.is_terminal or aggregate.needs_attention
            # A timer due in 15 minutes (the expiry of an unknown payment) is not live work.
            live = any(
                s.status is StepStatus.RUNNING
                or (s.status in DUE_STATUSES and (s.next_attempt_at or now) <= now)
                for s in aggregate.steps
            )
            done = done and waiting and not live
            states[aggregate.order.state.value] += 1
        unpublished = await store.unpublished_events(1)
        return done and not unpublished, states


async def _snapshot(url: str, order_ids: list[UUID], effects: dict[str, Any]) -> Any:
    async with PgOrderStore.open(url, max_size=2) as store:
        return await take_snapshot(store, order_ids, effects)


def test_orders_survive_workers_killed_at_random_and_every_rule_holds(
    pg_url: str, mocks_url: str
) -> None:
    seed = int(os.environ.get("ORDERFLOW_CHAOS_SEED", str(random.SystemRandom().randrange(2**32))))
    print(f"\nchaos seed {seed} (ORDERFLOW_CHAOS_SEED={seed} replays the faults and kills)")
    rng = random.Random(seed)
    began = time.monotonic()
    order_ids = asyncio.run(_create_orders(pg_url, rng))
    scripted = _script_faults(mocks_url, order_ids, rng)
    env = base_env(
        ORDERFLOW_DATABASE_URL=pg_url,
        ORDERFLOW_WAREHOUSE_URL=mocks_url,
        ORDERFLOW_PAYMENTS_URL=mocks_url,
        ORDERFLOW_SHIPPING_URL=mocks_url,
        ORDERFLOW_LEASE_S="2",
        ORDERFLOW_HEARTBEAT_S="0.5",
        ORDERFLOW_RETRY_DELAYS_S="0.1,0.2,0.4,0.8",
        ORDERFLOW_CALL_TIMEOUT_S="0.5",
        ORDERFLOW_POLL_INTERVAL_S="0.1",
        ORDERFLOW_SHUTDOWN_GRACE_S="2",
    )
    generations = [0] * WORKERS
    workers = [_worker(env, i, 0) for i in range(WORKERS)]
    kills = 0
    try:
        chaos_ends = time.monotonic() + CHAOS_S
        while time.monotonic() < chaos_ends:
            time.sleep(rng.uniform(0.5, 1.5))  # the kill schedule, not a wait for a condition
            victim = rng.randrange(WORKERS)
            workers[victim].kill()
            kills += 1
            generations[victim] += 1
            workers[victim].close()
            workers[victim] = _worker(env, victim, generations[victim])
        chaos_over = time.monotonic()
        deadline = chaos_over + DRAIN_S
        done, states = asyncio.run(_settled(pg_url, order_ids))
        while not done and time.monotonic() < deadline:
            done, states = asyncio.run(_settled(pg_url, order_ids))
        drained = time.monotonic() - chaos_over
        assert done, f"not drained within {DRAIN_S:g} s: {dict(states)}"
    finally:
        for w in workers:  # a worker restarted a moment ago installs its SIGTERM handler first
            if w.popen.poll() is None:
                w.wait_for(r"orderflow worker \S+ running", timeout_s=60)
        exits = [w.terminate() if w.popen.poll() is None else None for w in workers]
        for w in workers:
            w.close()
    assert all(code in (0, None) for code in exits), exits

    ledger = _http(f"{mocks_url}/_control/ledger")
    snap = asyncio.run(_snapshot(pg_url, order_ids, ledger["effects"]))
    check_snapshot(snap)
    for record in snap.orders:
        aggregate = record.aggregate
        assert aggregate.order.is_terminal or aggregate.needs_attention, aggregate.order.state
    per_key = Counter(
        e["idempotency_key"]
        for kind in ("charges", "reservations", "shipments", "refunds")
        for e in ledger["effects"][kind]
    )
    assert set(per_key.values()) <= {1}
    calls = Counter(c["idempotency_key"] for c in ledger["calls"])
    print(
        f"chaos figures: orders={ORDERS} workers={WORKERS} kills={kills} "
        f"scripted_faults={scripted} calls={len(ledger['calls'])} "
        f"keys_called={len(calls)} max_calls_per_key={max(calls.values())} "
        f"effects={sum(per_key.values())} max_effects_per_key={max(per_key.values())} "
        f"events={len(snap.events)} chaos_s={CHAOS_S:g} drain_s={drained:.1f} "
        f"total_s={time.monotonic() - began:.1f}\nfinal states: {dict(sorted(states.items()))}"
    )
