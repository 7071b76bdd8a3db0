"""`python -m bench.hotpath`: the worker's own Python work for one order, without any I/O.

The end-to-end bench says how fast the whole system is, but a change of a few percent of the
worker's CPU drowns in the host's drift there (PostgreSQL's CPU per order of the same work
moves by ±20 % between minutes). This replays, in one process, what a worker computes for an
order on the group-commit path: the claimed copy, the start's decision and its document, each
result's decision chaining the next step's intent, each document with what the kept copy
expects, the batch's JSON, and the copy kept after each write — the same functions the store
and the executor call, on the same kind of order the bench runs. It reports microseconds per
order (the best of several rounds, so a slow minute of the host does not count) and the
number of Python function calls per order (exact, from a profile: a change that only moves
time around shows no difference there, one that removes work does).

    python -m bench.hotpath                 # 2,000 orders per round, 7 rounds
    python -m bench.hotpath --orders 500 --rounds 3
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from orderflow_core import commands, ids, saga
from orderflow_core.context import Context, Timing
from orderflow_core.model import ApiIdempotency, Claim, Item, OrderAggregate, Principal
from orderflow_core.outcomes import Outcome, Succeeded
from orderflow_core.states import StepKind, StepStatus
from orderflow_pg import reads, write_engine, writes

WORKER = "bench-worker"
ITEMS = (Item("SKU-1", 1, 100),)
ANSWERS: dict[StepKind, Outcome] = {
    StepKind.RESERVE: Succeeded({"reservation_id": "r-1", "status": "held"}),
    StepKind.CHARGE: Succeeded({"payment_reference": "p-1", "status": "succeeded"}),
    StepKind.SHIP: Succeeded({"shipment_id": "s-1"}),
}


class _Ticking:
    """Time that moves 1 ms per reading, as the decisions of one order would see it, and ids
    drawn from a seeded generator: the same run every time (with PYTHONHASHSEED fixed, the
    same instructions under callgrind)."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)
        self._random = random.Random(0)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now

    def new_id(self) -> UUID:
        return ids.uuid7(
            time_ns=lambda: int(self.now.timestamp() * 1e9), random_bytes=self._random.randbytes
        )


def _created(clock: _Ticking, n: int) -> list[OrderAggregate]:
    """`n` orders as the API leaves them (not timed)."""
    principal = Principal("bench", "customer")
    made = []
    for i in range(n):
        order_id = clock.new_id()
        idem = ApiIdempotency("bench", "orders", f"k-{i}", "f", order_id, clock())
        ctx = Context(clock(), "customer:bench", new_id=clock.new_id)
        change = commands.create_order(principal, ITEMS, "RUB", idem, ctx, process_version=1)
        if change.order is None:
            raise RuntimeError("create_order made no order")
        made.append(OrderAggregate(order=change.order).with_change(change))
    return made


def _claimed(aggregate: OrderAggregate, now: datetime, timing: Timing) -> tuple[Claim, Any]:
    """The claim of the order's due step and the copy the store keeps of it (the claim put in
    by `claimed_aggregates`' own `with_claim`)."""
    step = next(s for s in aggregate.steps if s.status is StepStatus.PENDING)
    lease = now + timedelta(seconds=timing.lease_s)
    claim = Claim(step.step_id, step.order_id, step.kind, step.attempt + 1, WORKER, lease)
    copy = reads.with_claim(aggregate, claim)
    if copy is None:
        raise RuntimeError(f"order {aggregate.order.order_id} has no step {step.step_id}")
    return claim, copy


def _write(
    kept: tuple[int, OrderAggregate], change: Any, batch: list[dict[str, Any]]
) -> tuple[int, OrderAggregate]:
    """What the group commit does for one decided change on a kept copy: its document (with
    what the copy expects), then, the change applied, the copy it keeps (as `_settle` does)."""
    version, before = kept
    planned = write_engine._document(0, before, version, change, from_copy=True)
    if not isinstance(planned, tuple) or planned[1] is None:
        raise RuntimeError(f"the replay's change was not written: {change}")
    doc, sent = planned
    batch.append(doc)
    version = sent.version + 1 if sent.raises_version else sent.version
    return version, sent.before.with_change(sent.change)


def _worker(clock: _Ticking, timing: Timing) -> Context:
    """The context of one of the worker's decisions (`Executor._ctx`)."""
    return Context(clock(), WORKER, timing, clock.new_id)


def replay(
    orders: list[OrderAggregate], clock: _Ticking
) -> list[tuple[OrderAggregate, list[dict[str, Any]]]]:
    """Run each order from its claim to its end: per order, the copy kept after its last
    write and the documents its writes sent."""
    timing = Timing(chain_steps=True)
    done = []
    for aggregate in orders:
        batch: list[dict[str, Any]] = []
        claim, copy = _claimed(aggregate, clock(), timing)
        kept = (0, copy)
        change, plan = saga.decide_start(kept[1], claim, _worker(clock, timing))
        kept = _write(kept, change, batch)
        current: tuple[Claim, Any] | None = (claim, plan) if plan is not None else None
        while current is not None:
            claim = current[0]
            change, current = saga.decide_result(
                kept[1], claim, ANSWERS[claim.kind], _worker(clock, timing), chain=True
            )
            kept = _write(kept, change, batch)
        writes.documents(batch)
        done.append((kept[1], batch))
    return done


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.hotpath", description=__doc__)
    p.add_argument("--orders", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument(
        "--once",
        action="store_true",
        help="create and replay the orders once, untimed, and print nothing (for a run under "
        "`PYTHONHASHSEED=0 valgrind --tool=callgrind`, whose count does not drift with the host)",
    )
    args = p.parse_args()
    clock = _Ticking()
    if args.once:
        replay(_created(clock, args.orders), clock)
        return
    best = float("inf")
    for _ in range(args.rounds):
        orders = _created(clock, args.orders)
        began = time.perf_counter()
        replay(orders, clock)
        best = min(best, time.perf_counter() - began)
    orders = _created(clock, args.orders)
    profile = cProfile.Profile()
    profile.enable()
    replay(orders, clock)
    profile.disable()
    calls = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
    print(
        {
            "us_per_order": round(1e6 * best / args.orders, 1),
            "calls_per_order": round(calls / args.orders, 1),
            "orders": args.orders,
            "rounds": args.rounds,
        }
    )


if __name__ == "__main__":
    main()
