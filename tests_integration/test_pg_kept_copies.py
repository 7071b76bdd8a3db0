"""A store decides its next change of an order it wrote last on the copy it kept (no locking
read), and writes it only if the order is still as the copy says; an order another writer
(another process) changed meanwhile — a command, or a claim of one of its steps — is read
again and decided afresh."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AsyncExitStack
from typing import Any

import attrs
import pytest
from builders import T0, at, creation, new_order, new_step, reserved_change
from conftest import Run

from orderflow_core.model import Change, OrderAggregate
from orderflow_core.states import OrderState, StepKind, StepStatus
from orderflow_pg import PgOrderStore, write_engine

pytestmark = pytest.mark.postgres


@pytest.fixture
def two_stores(pg_url: str, run: Run[Any]) -> Iterator[tuple[PgOrderStore, PgOrderStore]]:
    """Two stores on one database, as two processes have."""
    stack = AsyncExitStack()
    a = run(stack.enter_async_context(PgOrderStore.open(pg_url, max_size=2)))
    b = run(stack.enter_async_context(PgOrderStore.open(pg_url, max_size=2)))
    try:
        yield a, b
    finally:
        run(stack.aclose())


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many orders each locking read of a group commit read."""
    counted: list[int] = []
    real = write_engine.lock_aggregates

    async def counting(conn: Any, order_ids: Any) -> Any:
        counted.append(len(order_ids))
        return await real(conn, order_ids)

    monkeypatch.setattr(write_engine, "lock_aggregates", counting)
    return counted


def noting(seen: list[tuple[int, OrderState]]) -> Any:
    """A decision that raises event_seq by one and says what it was decided on."""

    def decide(aggregate: OrderAggregate) -> tuple[Change, int]:
        order = aggregate.order
        seen.append((order.event_seq, order.state))
        return Change(order=attrs.evolve(order, event_seq=order.event_seq + 1)), order.event_seq

    return decide


def test_an_order_this_store_wrote_last_is_decided_on_its_copy_without_a_read(
    two_stores: tuple[PgOrderStore, PgOrderStore], reads: list[int], run: Run[Any]
) -> None:
    a, _ = two_stores
    orders = [new_order() for _ in range(3)]
    for order in orders:
        run(a.create(creation(order, key=None)))
    seen: list[tuple[int, OrderState]] = []
    batch = [(o.order_id, noting(seen)) for o in orders]
    assert run(a.update_many(batch)) == [1, 1, 1]  # created with its one event
    assert reads == [3]  # the first write of each order reads it
    assert run(a.update_many(batch)) == [2, 2, 2]
    assert run(a.update_many(batch)) == [3, 3, 3]
    assert reads == [3], "no locking read for orders this store wrote last"
    for order in orders:
        assert run(a.load(order.order_id)).order.event_seq == 4


def test_an_order_changed_by_another_writer_is_read_again_and_decided_afresh(
    two_stores: tuple[PgOrderStore, PgOrderStore], reads: list[int], run: Run[Any]
) -> None:
    a, b = two_stores
    mine, theirs = new_order(), new_order()
    for order in (mine, theirs):
        run(a.create(creation(order, key=None)))
    seen: list[tuple[int, OrderState]] = []
    run(a.update_many([(mine.order_id, noting(seen)), (theirs.order_id, noting(seen))]))

    def cancel(aggregate: OrderAggregate) -> tuple[Change, None]:
        return Change(order=attrs.evolve(aggregate.order, state=OrderState.CANCELLED)), None

    run(b.update(theirs.order_id, cancel))  # another process's command
    seen.clear()
    reads.clear()
    results = run(a.update_many([(mine.order_id, noting(seen)), (theirs.order_id, noting(seen))]))

    assert results == [2, 2]
    # `theirs` was decided on the stale copy first (still `created`), then read and decided on
    # what the other writer left; only that second decision was written.
    assert seen == [(2, OrderState.CREATED), (2, OrderState.CREATED), (2, OrderState.CANCELLED)]
    assert reads == [1]
    after = run(a.load(theirs.order_id)).order
    assert (after.state, after.event_seq) == (OrderState.CANCELLED, 3)
    assert run(a.load(mine.order_id)).order.event_seq == 3


def test_a_claim_by_another_worker_outdates_a_kept_copy(
    two_stores: tuple[PgOrderStore, PgOrderStore], reads: list[int], run: Run[Any]
) -> None:
    a, b = two_stores
    order = new_order()
    later = T0.replace(minute=T0.minute + 5)
    timer = new_step(order, kind=StepKind.EXPIRE_RESERVATION, seq=2, due=later)
    run(a.create(attrs.evolve(creation(order, key=None), steps=(new_step(order, due=None), timer))))
    seen: list[tuple[int, OrderState]] = []
    run(a.update_many([(order.order_id, noting(seen))]))
    # Another worker claims the timer: a step changes, the order's version does not.
    [claim] = run(b.claim_due(owner="B", now=later, limit=1, lease_s=30))
    assert claim.step_id == timer.step_id
    reads.clear()

    step_seen: list[tuple[int, str]] = []

    def touch_timer(aggregate: OrderAggregate) -> tuple[Change, None]:
        step = aggregate.step(timer.step_id)
        assert step is not None
        step_seen.append((step.attempt, step.status.value))
        return Change(steps=(attrs.evolve(step, last_error="noted"),)), None

    run(a.update_many([(order.order_id, touch_timer)]))
    assert step_seen == [(0, "pending"), (1, "running")], "the copy's view, then the real one"
    assert reads == [1]
    step = run(a.load(order.order_id)).step(timer.step_id)
    assert step is not None
    assert (step.attempt, step.status.value, step.lease_owner, step.last_error) == (
        1,
        "running",
        "B",
        "noted",
    )


def test_an_order_with_no_step_left_to_run_is_not_kept(
    two_stores: tuple[PgOrderStore, PgOrderStore], reads: list[int], run: Run[Any]
) -> None:
    """A finished order is not come back to by a worker: keeping its copy would only hold
    memory (a worker's resident set grew by ~30 MiB over a soak while it kept 10,000 of them)."""
    a, _ = two_stores
    live, done = new_order(), new_order()
    for order in (live, done):
        run(a.create(creation(order, key=None)))

    def finish(aggregate: OrderAggregate) -> tuple[Change, None]:
        steps = tuple(attrs.evolve(s, status=StepStatus.SUCCEEDED) for s in aggregate.steps)
        order = attrs.evolve(aggregate.order, event_seq=aggregate.order.event_seq + 1)
        return Change(order=order, steps=steps), None

    seen: list[tuple[int, OrderState]] = []
    run(a.update_many([(live.order_id, noting(seen)), (done.order_id, finish)]))
    reads.clear()
    assert run(a.update_many([(live.order_id, noting(seen)), (done.order_id, noting(seen))])) == [
        2,
        2,
    ]
    assert reads == [1], "the finished order is read again; the live one is decided on its copy"
    assert run(a.load(done.order_id)).order.event_seq == 3


def test_a_result_decided_on_a_kept_copy_after_its_step_was_claimed_again_is_fenced_off(
    two_stores: tuple[PgOrderStore, PgOrderStore], reads: list[int], run: Run[Any]
) -> None:
    """The guarded step is not compared with the copy (its own update checks the generation):
    a result of a lease that expired and was claimed again by another worker writes nothing
    but its rejection, though the order's version did not move."""
    a, b = two_stores
    order = new_order()
    run(a.create(creation(order, key=None)))
    [claim_a] = run(a.claim_due(owner="A", now=T0, limit=1, lease_s=30))
    run(a.update_many([(order.order_id, noting([]))]))  # a keeps a copy: step running for A
    [claim_b] = run(b.claim_due(owner="B", now=at(31), limit=1, lease_s=30))
    assert (claim_b.step_id, claim_b.attempt) == (claim_a.step_id, claim_a.attempt + 1)
    kept = run(a.load(order.order_id))
    step = kept.steps[0]
    late = reserved_change(kept.order, step, claim_a, worker="A")
    reads.clear()
    seen: list[tuple[int, str | None]] = []

    def decide(aggregate: OrderAggregate) -> tuple[Change, str]:
        seen.append((aggregate.steps[0].attempt, aggregate.steps[0].lease_owner))
        return late, "decided"

    assert run(a.update_many([(order.order_id, decide)])) == ["decided"]
    assert seen == [(1, "A"), (2, "B")], "decided on the copy, fenced off, read and decided again"
    assert reads == [1]
    after = run(a.load(order.order_id))
    assert after.order.state is OrderState.CREATED
    assert (after.steps[0].attempt, after.steps[0].lease_owner) == (claim_b.attempt, "B")
    assert run(a.audit_entries(order.order_id))[-1] == late.on_reject


def test_a_claim_keeps_what_it_read_so_the_start_is_decided_without_a_locking_read(
    two_stores: tuple[PgOrderStore, PgOrderStore], reads: list[int], run: Run[Any]
) -> None:
    """The claim statement returns each claimed order's aggregate beside the claim; with the
    claim put in, it is exactly what a fresh read shows, and the start is decided on it."""
    a, b = two_stores
    orders = [new_order() for _ in range(3)]
    both = new_order()  # two steps of one order claimed by the same statement
    timer = new_step(both, kind=StepKind.EXPIRE_RESERVATION, seq=2, due=T0)
    for order in orders:
        run(b.create(creation(order, key=None)))
    run(b.create(attrs.evolve(creation(both, key=None), steps=(new_step(both), timer))))
    claims = run(a.claim_due(owner="A", now=T0, limit=10, lease_s=30))
    assert len(claims) == 5
    fresh = {o.order_id: run(b.load(o.order_id)) for o in [*orders, both]}
    decided_on: dict[Any, OrderAggregate] = {}

    def start(aggregate: OrderAggregate) -> tuple[Change, None]:
        decided_on[aggregate.order.order_id] = aggregate
        order = attrs.evolve(aggregate.order, event_seq=aggregate.order.event_seq + 1)
        return Change(order=order), None

    ids = [o.order_id for o in [*orders, both]]
    run(a.update_many([(order_id, start) for order_id in ids]))
    assert reads == [], "decided on what the claim read"
    assert decided_on == fresh
    steps = decided_on[both.order_id].steps
    assert [(s.status, s.attempt, s.lease_owner) for s in steps] == [
        (StepStatus.RUNNING, 1, "A"),
        (StepStatus.RUNNING, 1, "A"),
    ]
    assert all(run(b.load(i)).order.event_seq == 2 for i in ids)


def test_an_order_changed_between_its_claim_and_the_start_is_read_again(
    two_stores: tuple[PgOrderStore, PgOrderStore], reads: list[int], run: Run[Any]
) -> None:
    a, b = two_stores
    order = new_order()
    run(b.create(creation(order, key=None)))
    run(a.claim_due(owner="A", now=T0, limit=1, lease_s=30))

    def cancel(aggregate: OrderAggregate) -> tuple[Change, None]:
        return Change(order=attrs.evolve(aggregate.order, state=OrderState.CANCELLED)), None

    run(b.update(order.order_id, cancel))  # a command in another process, after the claim
    seen: list[tuple[int, OrderState]] = []
    assert run(a.update_many([(order.order_id, noting(seen))])) == [1]
    assert seen == [(1, OrderState.CREATED), (1, OrderState.CANCELLED)]
    assert reads == [1]
    after = run(a.load(order.order_id)).order
    assert (after.state, after.event_seq) == (OrderState.CANCELLED, 2)
