"""The cost floor of one order on this machine: what any durable three-step order must spend.

A minimal loop with no decisions: per order, the three calls to the simulated services that
the executor and the peers make (same paths, bodies and idempotency headers as
bench/peer_chains.py), and after each call one durable write of its result, group-committed
(every result that arrives while a commit is in flight goes into the next one; a step waits
for its result's commit before the next call, as a durable workflow must). No API, no claim,
no intent, no fencing, no outbox, no audit: nothing orderflow adds to the bare job. Its
orders/s and CPU per order, measured in the same run as ours, are what our figures are read
against (the floor ratio; docs/benchmark.md).

Run by the bench as a process of its own, on orderflow's interpreter (psycopg 3, aiohttp,
uvloop where installed: the libraries our processes use):
    python -m bench.floor DB_URL MOCKS_URL ORDERS CONCURRENCY [RATE]
With RATE (orders/s) it is an open loop, as the bench's low-load run of orderflow: order i
starts at i / RATE s (a deadline schedule), at most CONCURRENCY orders in flight, and an
order's latency counts from its scheduled start. Without it, CONCURRENCY slots take orders as
fast as they finish (closed loop). It prints `{"load": "start"}` before its first order and
`{"load": "end"}` after its last commit (the bench reads the processes' CPU at both), then one
JSON line of figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from typing import Any

import aiohttp
import psycopg


def _cpu_s() -> float:
    """This process's CPU so far (all its threads), for the bench's load markers."""
    t = os.times()
    return t.user + t.system


ITEMS = [{"sku": "SKU-BENCH-1", "quantity": 2}, {"sku": "SKU-BENCH-2", "quantity": 1}]
STEPS = (
    ("reserve", "/warehouse/v1/reservations"),
    ("charge", "/payments/v1/charges"),
    ("ship", "/shipping/v1/shipments"),
)
CREATE = """CREATE TABLE IF NOT EXISTS floor_results (
    order_id uuid NOT NULL, step text NOT NULL, status int NOT NULL, body bytea NOT NULL,
    at timestamptz NOT NULL, PRIMARY KEY (order_id, step))"""
INSERT = ("INSERT INTO floor_results (order_id, step, status, body, at) "
          "SELECT o, s, st, b, to_timestamp(t) FROM unnest(%s::uuid[], %s::text[], %s::int[], "
          "%s::bytea[], %s::float8[]) AS u(o, s, st, b, t)")
Row = tuple[str, str, int, bytes, float]


class GroupCommit:
    """One writer: every result queued while a commit is in flight goes into the next one."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn
        self.pending: list[tuple[Row, asyncio.Future[None]]] = []
        self.wake = asyncio.Event()
        self.commits = 0

    async def write(self, row: Row) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.append((row, done))
        self.wake.set()
        await done

    async def run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            batch, self.pending = self.pending, []
            if not batch:
                continue
            cols = list(zip(*(row for row, _ in batch), strict=True))
            async with self.conn.transaction():
                await self.conn.execute(INSERT, [list(col) for col in cols])
            self.commits += 1
            for _, done in batch:
                done.set_result(None)


def _body(step: str, order: str) -> dict[str, Any]:
    if step == "charge":
        return {"order_id": order, "amount_minor": 52900, "currency": "RUB"}
    return {"order_id": order, "items": ITEMS}


async def _order(session: aiohttp.ClientSession, mocks: str, writer: GroupCommit,
                 order: str) -> bool:
    ok = True
    for step, path in STEPS:
        headers = {"Idempotency-Key": f"{order}:{step}", "X-Order-Id": order, "X-Step-Id": step}
        async with session.post(f"{mocks}{path}", json=_body(step, order),
                                headers=headers) as resp:
            body = await resp.read()
            ok = ok and resp.status < 300
        await writer.write((order, step, resp.status, body, time.time()))
    return ok


def _pct(values: list[float], p: int) -> float | None:
    ordered = sorted(values)
    return round(ordered[max(1, -(-p * len(ordered) // 100)) - 1] * 1000, 1) if ordered else None


async def main(url: str, mocks: str, orders: int, concurrency: int, rate: float = 0.0) -> None:
    mocks = mocks.rstrip("/")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(CREATE)
        writer = GroupCommit(conn)
        writing = asyncio.create_task(writer.run())
        ids = [str(uuid.uuid4()) for _ in range(orders)]
        latencies: list[float] = []
        failures = 0
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100)) as session:

            async def one(order: str, since: float) -> None:
                """An order's three calls and writes, its latency counted from `since`."""
                nonlocal failures
                if not await _order(session, mocks, writer, order):
                    failures += 1
                latencies.append(time.monotonic() - since)

            async def slot() -> None:
                while ids:
                    await one(ids.pop(), time.monotonic())

            slots = asyncio.Semaphore(concurrency)

            async def scheduled(order: str, due: float) -> None:
                async with slots:
                    await one(order, due)

            async def open_loop() -> None:
                tasks = []
                for i, order in enumerate(ids):
                    due = started + i / rate
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                    tasks.append(asyncio.create_task(scheduled(order, due)))
                await asyncio.gather(*tasks)

            print(json.dumps({"load": "start", "cpu_s": _cpu_s()}), flush=True)
            started = time.monotonic()
            if rate > 0:
                await open_loop()
            else:
                await asyncio.gather(*(slot() for _ in range(concurrency)))
            elapsed = time.monotonic() - started
            print(json.dumps({"load": "end", "cpu_s": _cpu_s()}), flush=True)
        writing.cancel()
    print(json.dumps({
        "system": "floor",
        "orders": orders,
        "offered_rate": rate or None,
        "chains_done": len(latencies),
        "call_failures": failures,
        "commits": writer.commits,
        "elapsed_s": round(elapsed, 2),
        "chains_per_s": round(len(latencies) / elapsed, 1),
        "chain_latency_ms": {f"p{p}": _pct(latencies, p) for p in (50, 95, 99)},
    }), flush=True)


if __name__ == "__main__":
    db, mocks_url, n, conc = sys.argv[1:5]
    offered = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    try:
        import uvloop
        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(main(db, mocks_url, int(n), int(conc), offered))
