"""A call that outlasts a heartbeat keeps its lease by renewing it; a call whose lease is lost is
cancelled at the next heartbeat and nothing of its attempt is committed (rule 6); a call whose
deadline ends before both the lease and the first heartbeat runs without renewing at all."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta

import attrs
import pytest

from orderflow_core import (
    CallContext,
    Executor,
    Item,
    OrderState,
    Services,
    Step,
    StepKind,
    StepStatus,
    StoreUnavailable,
    Timing,
    Warehouse,
)
from orderflow_core.model import Claim
from orderflow_core.outcomes import Outcome
from orderflow_core.testing import InMemoryOrderStore
from tests_core.rules import check_all_rules
from tests_core.waiting import until
from tests_core.world import World

LEASE_S = 30.0
HEARTBEAT_S = 10.0
LONG_CALL_S = 120.0  # longer than the heartbeat and the lease: the heartbeat must run
SHORT_CALL_S = 3.0  # shorter than both: the fast path


@attrs.frozen
class Renewal:
    """One `renew_lease` call as the store saw it."""

    owner: str
    attempt: int
    now: datetime
    held: bool | None  # None: the store raised StoreUnavailable


class RenewalRecordingStore(InMemoryOrderStore):
    """The in-memory store, recording every lease renewal; it can fail the next few renewals
    as an unreachable database would."""

    def __init__(self) -> None:
        super().__init__()
        self.renewals: list[Renewal] = []
        self.unavailable_renewals = 0

    async def renew_lease(self, claim: Claim, *, now: datetime, lease_s: float) -> bool:
        if self.unavailable_renewals > 0:
            self.unavailable_renewals -= 1
            self.renewals.append(Renewal(claim.owner, claim.attempt, now, None))
            raise StoreUnavailable("renewal: database unreachable")
        held = await super().renew_lease(claim, now=now, lease_s=lease_s)
        self.renewals.append(Renewal(claim.owner, claim.attempt, now, held))
        return held


class SlowWarehouse:
    """The simulated warehouse whose answer to `reserve` is held back until `answer` is set:
    the request reaches the warehouse (its effect is applied and in the ledger) at once, the
    response comes only when the test says so. Counts calls waiting, answered and cancelled."""

    def __init__(self, inner: Warehouse) -> None:
        self.inner = inner
        self.answer = asyncio.Event()
        self.waiting = 0
        self.answered = 0
        self.cancelled = 0

    async def reserve(self, call: CallContext, items: Sequence[Item]) -> Outcome:
        outcome = await self.inner.reserve(call, items)
        self.waiting += 1
        try:
            await self.answer.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.waiting -= 1
        self.answered += 1
        return outcome

    async def release(self, call: CallContext, reservation_key: str) -> Outcome:
        return await self.inner.release(call, reservation_key)


async def heartbeat_asleep_after(w: World, store: RenewalRecordingStore, renewals: int) -> None:
    """Wait until the heartbeat has tried its `renewals`-th renewal and sleeps again."""
    await until(lambda: len(store.renewals) == renewals and w.clock.sleepers == 1)


def heartbeat_world() -> tuple[World, RenewalRecordingStore, SlowWarehouse]:
    store = RenewalRecordingStore()
    w = World(store=store)
    return w, store, SlowWarehouse(w.services.warehouse)


def executor(
    w: World,
    worker_id: str,
    *,
    call_timeout_s: float,
    heartbeat_s: float = HEARTBEAT_S,
    warehouse: Warehouse | None = None,
) -> Executor:
    """An executor on the world's store and clock; `warehouse` replaces the simulated one."""
    services = w.services
    if warehouse is not None:
        services = Services(warehouse, services.payments, services.shipping)
    timing = Timing(lease_s=LEASE_S, heartbeat_s=heartbeat_s, call_timeout_s=call_timeout_s)
    return Executor(
        store=w.store, services=services, clock=w.clock, worker_id=worker_id, timing=timing
    )


def lease_lost_logged(caplog: pytest.LogCaptureFixture) -> bool:
    """Whether the executor logged that a call's lease was lost (it raised `LeaseLost`)."""
    return any("lost during the call" in r.getMessage() for r in caplog.records)


async def step_of(w: World, claim: Claim) -> Step:
    aggregate = await w.store.load(claim.order_id)
    assert aggregate is not None
    step = aggregate.step(claim.step_id)
    assert step is not None
    return step


def test_a_long_call_renews_its_lease_every_heartbeat_and_then_commits() -> None:
    w, store, warehouse = heartbeat_world()
    a = executor(w, "worker-a", call_timeout_s=LONG_CALL_S, warehouse=warehouse)
    b = executor(w, "worker-b", call_timeout_s=LONG_CALL_S)
    order_id = w.create()

    async def scenario() -> None:
        start = w.clock.now()
        [claim] = await a.claim()
        assert claim.kind is StepKind.RESERVE
        assert claim.lease_expires_at == start + timedelta(seconds=LEASE_S)
        attempt = asyncio.create_task(a.run_claimed([claim]))
        await until(lambda: warehouse.waiting == 1 and w.clock.sleepers == 1)
        assert store.renewals == []

        # Five heartbeats: 50 s, well past the 30 s lease the claim started with.
        for beat in range(1, 6):
            w.clock.advance(HEARTBEAT_S)
            await heartbeat_asleep_after(w, store, beat)
            now = w.clock.now()
            assert store.renewals[-1] == Renewal("worker-a", 1, now, True)
            step = await step_of(w, claim)
            assert step.status is StepStatus.RUNNING
            assert (step.lease_owner, step.attempt) == ("worker-a", 1)
            assert step.lease_expires_at == now + timedelta(seconds=LEASE_S)
            assert warehouse.waiting == 1, "the call is still in flight"
        assert not attempt.done()

        # The claim's own lease ran out 20 s ago, but the renewed lease keeps others off.
        assert w.clock.now() > claim.lease_expires_at
        assert await b.claim() == []

        warehouse.answer.set()
        await until(attempt.done)
        attempt.result()
        assert (warehouse.answered, warehouse.cancelled) == (1, 0)
        assert w.clock.sleepers == 0, "the heartbeat stopped with the call"

        step = await step_of(w, claim)
        assert step.status is StepStatus.SUCCEEDED
        assert (step.lease_owner, step.lease_expires_at) == (None, None)
        assert [(x.attempt, x.worker, x.outcome) for x in step.attempts] == [
            (1, "worker-a", "succeeded")
        ]
        assert step.attempts[0].finished_at == start + timedelta(seconds=5 * HEARTBEAT_S)
        aggregate = await w.store.load(order_id)
        assert aggregate is not None
        assert aggregate.order.state is OrderState.RESERVED

        renewed = len(store.renewals)
        w.clock.advance(HEARTBEAT_S)
        await asyncio.sleep(0)
        assert len(store.renewals) == renewed, "no renewal after the call ended"

    try:
        w.run(scenario())
        assert len(w.effects()["reservations"]) == 1
        check_all_rules(w)
    finally:
        w.close()


def test_a_call_whose_lease_was_taken_over_is_cancelled_at_the_next_heartbeat(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The store is unreachable for two renewals, the lease runs out, another executor claims
    the step; the first executor's call keeps waiting until its next heartbeat, which finds
    the lease lost and cancels it. The takeover's attempt is the only one that commits."""
    # Heartbeats at 12, 24, 36 s: the 30 s lease runs out between two of them.
    heartbeat_s = 12.0
    w, store, warehouse = heartbeat_world()
    a = executor(
        w, "worker-a", call_timeout_s=LONG_CALL_S, heartbeat_s=heartbeat_s, warehouse=warehouse
    )
    b = executor(w, "worker-b", call_timeout_s=LONG_CALL_S)
    order_id = w.create()

    async def scenario() -> None:
        [claim_a] = await a.claim()
        attempt_a = asyncio.create_task(a.run_claimed([claim_a]))
        await until(lambda: warehouse.waiting == 1 and w.clock.sleepers == 1)
        committed = len(store.committed)  # the order and the intent of attempt 1

        store.unavailable_renewals = 2
        for beat in (1, 2):  # t = 12 s, 24 s: renewals fail, the call goes on
            w.clock.advance(heartbeat_s)
            await heartbeat_asleep_after(w, store, beat)
            assert store.renewals[-1].held is None
        assert warehouse.waiting == 1

        w.clock.advance(LEASE_S - 2 * heartbeat_s + 1)  # t = 31 s: the lease ran out at 30 s
        [claim_b] = await b.claim()
        assert (claim_b.step_id, claim_b.attempt, claim_b.owner) == (
            claim_a.step_id,
            2,
            "worker-b",
        )
        # No heartbeat is due before 36 s: the stale call is still in flight for now.
        for _ in range(10):
            await asyncio.sleep(0)
        assert (warehouse.waiting, warehouse.cancelled) == (1, 0)
        assert not attempt_a.done()

        w.clock.advance(3 * heartbeat_s - LEASE_S - 1)  # t = 36 s: the next heartbeat
        await until(attempt_a.done)
        attempt_a.result()  # LeaseLost: the executor leaves the step to the takeover
        assert lease_lost_logged(caplog)
        assert store.renewals[-1] == Renewal("worker-a", 1, w.clock.now(), False)
        assert (warehouse.cancelled, warehouse.answered, warehouse.waiting) == (1, 0, 0)
        assert w.clock.sleepers == 0, "the heartbeat ended with the call"

        # Nothing of attempt 1's result reached the store: no change, no rejected-result audit.
        assert len(store.committed) == committed
        assert not [x for x in store.audit_log if x.action == "step.result_rejected"]
        step = await step_of(w, claim_a)
        assert step.status is StepStatus.RUNNING
        assert (step.attempt, step.lease_owner) == (2, "worker-b")
        assert [(x.attempt, x.outcome) for x in step.attempts] == [(1, None)]
        aggregate = await w.store.load(order_id)
        assert aggregate is not None
        assert aggregate.order.state is OrderState.RESERVING

        # Answering the cancelled call now changes nothing.
        warehouse.answer.set()
        await asyncio.sleep(0)
        assert warehouse.answered == 0

        await b.run_claimed([claim_b])
        step = await step_of(w, claim_a)
        assert step.status is StepStatus.SUCCEEDED
        assert [(x.attempt, x.worker, x.outcome) for x in step.attempts] == [
            (1, "worker-a", "abandoned"),
            (2, "worker-b", "succeeded"),
        ]

    try:
        w.run(scenario())
        assert w.state(order_id) is OrderState.RESERVED
        # Both attempts reached the warehouse under the step's one key: one reservation.
        calls = w.sim.ledger(order_id=str(order_id))["calls"]
        reserves = [c for c in calls if c["operation"] == "reserve"]
        assert [c["replayed"] for c in reserves] == [False, True]
        assert len({c["idempotency_key"] for c in reserves}) == 1
        assert len(w.effects()["reservations"]) == 1
        check_all_rules(w)
        w.settle()
        assert w.state(order_id) is OrderState.SHIPPED
        check_all_rules(w)
    finally:
        w.close()


def test_a_call_stalled_past_its_lease_is_cancelled_at_the_next_heartbeat(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The worker stalls (the clock jumps past the lease before any heartbeat ran): the first
    heartbeat finds the lease expired and cancels the call, even before anyone else claims."""
    w, store, warehouse = heartbeat_world()
    a = executor(w, "worker-a", call_timeout_s=LONG_CALL_S, warehouse=warehouse)
    order_id = w.create()

    async def scenario() -> None:
        [claim] = await a.claim()
        attempt = asyncio.create_task(a.run_claimed([claim]))
        await until(lambda: warehouse.waiting == 1 and w.clock.sleepers == 1)
        committed = len(store.committed)

        w.clock.advance(LEASE_S + 1)
        await until(attempt.done)
        attempt.result()  # LeaseLost: the executor leaves the step to lease expiry
        assert lease_lost_logged(caplog)
        assert store.renewals == [Renewal("worker-a", 1, w.clock.now(), False)]
        assert (warehouse.cancelled, warehouse.answered) == (1, 0)
        assert len(store.committed) == committed
        step = await step_of(w, claim)
        assert (step.status, step.attempt, step.lease_owner) == (
            StepStatus.RUNNING,
            1,
            "worker-a",
        )
        assert [(x.attempt, x.outcome) for x in step.attempts] == [(1, None)]

    try:
        w.run(scenario())
        assert w.state(order_id) is OrderState.RESERVING
        w.settle()  # worker-0 takes the expired step over and carries the order on
        assert w.state(order_id) is OrderState.SHIPPED
        check_all_rules(w)
    finally:
        w.close()


def test_a_call_shorter_than_the_lease_and_the_heartbeat_runs_without_renewing() -> None:
    w, store, warehouse = heartbeat_world()
    a = executor(w, "worker-a", call_timeout_s=SHORT_CALL_S, warehouse=warehouse)
    order_id = w.create()

    async def scenario() -> None:
        [claim] = await a.claim()
        attempt = asyncio.create_task(a.run_claimed([claim]))
        await until(lambda: warehouse.waiting == 1)
        # The call runs in the step's own task: no call task, no heartbeat task beside it.
        [step_task] = asyncio.all_tasks() - {asyncio.current_task(), attempt}
        assert getattr(step_task.get_coro(), "__qualname__", None) == "Executor._guarded"
        assert w.clock.sleepers == 0
        # So driving the clock past a heartbeat (not past the lease) renews nothing meanwhile.
        w.clock.advance(HEARTBEAT_S + 5)
        for _ in range(10):
            await asyncio.sleep(0)
        assert store.renewals == []
        assert warehouse.waiting == 1

        warehouse.answer.set()
        await until(attempt.done)
        attempt.result()
        assert store.renewals == []
        step = await step_of(w, claim)
        assert step.status is StepStatus.SUCCEEDED
        assert [(x.attempt, x.outcome) for x in step.attempts] == [(1, "succeeded")]

    try:
        w.run(scenario())
        assert w.state(order_id) is OrderState.RESERVED
        check_all_rules(w)
    finally:
        w.close()


class BrokenRenewalStore(RenewalRecordingStore):
    """A store whose renewal has a bug (not a transient StoreUnavailable)."""

    async def renew_lease(self, claim: Claim, *, now: datetime, lease_s: float) -> bool:
        self.renewals.append(Renewal(claim.owner, claim.attempt, now, None))
        raise RuntimeError("a bug in the store's renewal")


def test_a_renewal_that_raises_unexpectedly_keeps_the_heartbeat_and_the_call() -> None:
    store = BrokenRenewalStore()
    w = World(store=store)
    warehouse = SlowWarehouse(w.services.warehouse)
    a = executor(w, "worker-a", call_timeout_s=LONG_CALL_S, warehouse=warehouse)
    order_id = w.create()

    async def scenario() -> None:
        [claim] = await a.claim()
        attempt = asyncio.create_task(a.run_claimed([claim]))
        await until(lambda: warehouse.waiting == 1 and w.clock.sleepers == 1)
        for beat in (1, 2):
            w.clock.advance(HEARTBEAT_S)
            await heartbeat_asleep_after(w, store, beat)  # it keeps beating
        warehouse.answer.set()
        await until(attempt.done)
        attempt.result()  # the call's outcome, not the renewal's error
        step = await step_of(w, claim)
        assert step.status is StepStatus.SUCCEEDED
        aggregate = await w.store.load(order_id)
        assert aggregate is not None
        assert aggregate.order.state is OrderState.RESERVED

    try:
        w.run(scenario())
        check_all_rules(w)
    finally:
        w.close()
