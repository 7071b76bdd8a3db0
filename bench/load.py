"""The offered load: customers posting orders, and a watcher that sees them reach the end."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import aiohttp
import attrs
import psycopg

TERMINAL = ("shipped", "reservation_failed", "payment_failed", "cancelled", "refunded")
# Orders a person must look at also stop the clock: the flow will not move them on its own.
STUCK = ("payment_unknown", "shipping_failed")
BODY = {
    "items": [
        {"sku": "SKU-BENCH-1", "quantity": 2, "unit_price_minor": 1500},
        {"sku": "SKU-BENCH-2", "quantity": 1, "unit_price_minor": 49900},
    ],
    "currency": "RUB",
}
POLL_S = 0.2
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # `since` when no order came before the run
MAX_IN_FLIGHT = 512


@attrs.define
class Posted:
    """One POST /orders as the customer saw it."""

    started: float  # time.monotonic()
    latency_s: float
    status: int


@attrs.define
class Watch:
    """What the watcher saw: when the last order stopped, and how often it asked."""

    finished: float | None = None
    polls: int = 0
    done: int = 0


async def _post(session: aiohttp.ClientSession, url: str, token: str, key: str) -> Posted:
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
    started = time.monotonic()
    try:
        async with session.post(url, json=BODY, headers=headers) as resp:
            await resp.read()
            status = resp.status
    except (aiohttp.ClientError, TimeoutError):
        status = 0
    return Posted(started, time.monotonic() - started, status)


def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=MAX_IN_FLIGHT),
        timeout=aiohttp.ClientTimeout(total=30),
    )


async def closed_loop(api: str, token: str, *, orders: int, clients: int) -> list[Posted]:
    """`clients` customers each post their next order as soon as the last one was accepted."""
    url = f"{api}/api/v1/orders"
    run = uuid.uuid4().hex[:8]
    next_index = iter(range(orders))
    results: list[Posted] = []

    async def customer(session: aiohttp.ClientSession) -> None:
        # The customers share one iterator of order numbers, so each posts the next free one.
        for i in next_index:
            results.append(await _post(session, url, token, f"bench-{run}-{i}"))  # noqa: PERF401

    async with _session() as session:
        await asyncio.gather(*(customer(session) for _ in range(clients)))
    return results


async def open_loop(api: str, token: str, *, rate: float, seconds: float) -> list[Posted]:
    """Orders arrive at a fixed `rate` per second for `seconds`, whether or not the last one
    was answered (at most MAX_IN_FLIGHT outstanding, so a stalled server cannot eat memory)."""
    url = f"{api}/api/v1/orders"
    run = uuid.uuid4().hex[:8]
    total = max(1, round(rate * seconds))
    gate = asyncio.Semaphore(MAX_IN_FLIGHT)
    results: list[Posted] = []

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        async with gate:
            results.append(await _post(session, url, token, f"bench-{run}-{i}"))

    async with _session() as session:
        start = time.monotonic()
        tasks = []
        for i in range(total):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(session, i)))
        await asyncio.gather(*tasks)
    return results


async def watch(
    db_url: str, expected: asyncio.Future[int], watch_state: Watch, *, timeout_s: float,
    since: datetime | None = None,
) -> None:
    """Poll until `expected` (known once posting ends) orders created after `since` are
    terminal or stuck."""
    deadline = time.monotonic() + timeout_s
    stopped = (*TERMINAL, *STUCK)
    query = "SELECT count(*) FROM orders WHERE state = ANY(%s) AND created_at > %s"
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = await (await conn.execute(query, (list(stopped), since or EPOCH))).fetchone()
            watch_state.polls += 1
            watch_state.done = int(row[0]) if row else 0
            if expected.done() and watch_state.done >= expected.result():
                watch_state.finished = time.monotonic()
                return
            await asyncio.sleep(POLL_S)


async def outcome_counts(db_url: str, since: datetime | None = None) -> dict[str, Any]:
    """Of the orders created after `since`: how many in each state, created→last-transition
    seconds of the shipped ones, steps done."""
    after = {"since": since or EPOCH}
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        states = await (
            await conn.execute(
                "SELECT state, count(*) FROM orders WHERE created_at > %(since)s GROUP BY state",
                after,
            )
        ).fetchall()
        flow = await (
            await conn.execute(
                "SELECT extract(epoch FROM updated_at - created_at)::float8 FROM orders "
                "WHERE state = 'shipped' AND created_at > %(since)s",
                after,
            )
        ).fetchall()
        steps = await (
            await conn.execute(
                "SELECT count(*) FROM step_attempts WHERE finished_at > %(since)s", after
            )
        ).fetchone()
        tables = await (
            await conn.execute(
                "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del "
                "FROM pg_stat_user_tables WHERE n_tup_ins + n_tup_upd + n_tup_del > 0 "
                "ORDER BY relname"
            )
        ).fetchall()
    return {
        "states": {s: int(c) for s, c in states},
        "flow_s": [float(r[0]) for r in flow],
        "attempts_finished": int(steps[0]) if steps else 0,
        "row_writes": {t[0]: {"ins": t[1], "upd": t[2], "hot_upd": t[3], "del": t[4]}
                       for t in tables},
    }
