"""Executors on one database: competing claims, stop points with takeover after the lease
expires, and a stalled executor whose lease ran out — for every step kind."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from uuid import UUID

import pytest

from acceptance.stack import Stack, crash_at
from orderflow_core import OrderState, StepKind
from orderflow_core.model import Claim
from tests_core.world import CUSTOMER, OPERATOR

pytestmark = pytest.mark.postgres
S = OrderState
K = StepKind
LEASE_S = 30


def _order(stack: Stack, *script: tuple[str, str, str], rounds: int = 0) -> UUID:
    order_id = stack.create()
    for service, operation, outcome in script:
        stack.sim.script(service, operation, [outcome], order_id=str(order_id))
    for _ in range(rounds):
        stack.step()
    return order_id


def _refund_due(stack: Stack) -> UUID:
    order_id = _order(stack, ("shipping", "ship", "permanent"), rounds=3)
    stack.run(stack.service.request_refund(OPERATOR, order_id, "refund-1", None, "lost"))
    return order_id


def _release_due(stack: Stack) -> UUID:
    order_id = _order(stack, rounds=1)
    stack.run(stack.service.cancel(CUSTOMER, order_id))
    return order_id


def _expiry_due(stack: Stack) -> UUID:
    order_id = stack.create()
    stack.sim.script("payments", "charge", ["transient"] * 5, order_id=str(order_id))
    stack.settle(max_rounds=30)  # the charge fails after 1, 2, 4, 8 s; only the timer is left
    stack.clock.advance(900)
    return order_id


# kind -> (how to make exactly that step due, where the order ends)
SETUPS: dict[K, tuple[Callable[[Stack], UUID], S]] = {
    K.RESERVE: (_order, S.SHIPPED),
    K.CHARGE: (lambda s: _order(s, rounds=1), S.SHIPPED),
    K.RECONCILE_PAYMENT: (
        lambda s: _order(s, ("payments", "charge", "lost_response"), rounds=2),
        S.SHIPPED,
    ),
    K.SHIP: (lambda s: _order(s, rounds=2), S.SHIPPED),
    K.RELEASE_RESERVATION: (_release_due, S.CANCELLED),
    K.EXPIRE_RESERVATION: (_expiry_due, S.PAYMENT_FAILED),
    K.REFUND: (_refund_due, S.REFUNDED),
}
CALLING_KINDS = sorted(set(SETUPS) - {K.EXPIRE_RESERVATION})


def _one_effect_per_key(stack: Stack, order_id: UUID) -> None:
    for kind, rows in stack.ledger(order_id)["effects"].items():
        keys = [r.get("idempotency_key") for r in rows]
        assert len(keys) == len(set(keys)), (kind, rows)


@pytest.mark.parametrize("kind", sorted(SETUPS))
@pytest.mark.parametrize("point", ["after_claim", "before_call", "after_call", "after_commit"])
def test_an_executor_stopped_at_any_point_is_taken_over_after_its_lease_expires(
    stack: Stack, kind: K, point: str
) -> None:
    how, final = SETUPS[kind]
    order_id = how(stack)
    stopped = stack.load(order_id).latest(kind)
    assert stopped is not None
    if point == "after_claim":
        claims = stack.run(stack.executors[0].claim(limit=1))
        assert [c.kind for c in claims] == [kind]
    else:
        if kind is K.EXPIRE_RESERVATION:
            pytest.skip("the expiry timer makes no call: it decides while claiming")
        stack.hook = crash_at(point, kind)
        assert stack.step(0, limit=1) == 1
        stack.hook = None
    if point != "after_commit":
        assert stack.step(1) == 0  # the lease still holds: nobody else may take the step
        stack.clock.advance(LEASE_S + 1)
        assert stack.step(1) >= 1  # now worker-1 takes it over, under the next generation
        step = stack.load(order_id).step(stopped.step_id)
        assert step is not None
        assert (2, "worker-1") in {(a.attempt, a.worker) for a in step.attempts}
    stack.settle()
    assert stack.state(order_id) is final
    _one_effect_per_key(stack, order_id)


@pytest.mark.parametrize("kind", CALLING_KINDS)
def test_a_stalled_executor_whose_lease_expired_cannot_store_its_result(
    stack: Stack, kind: K
) -> None:
    how, final = SETUPS[kind]
    order_id = how(stack)
    stalled: asyncio.Future[Claim] = stack.loop.create_future()
    release: asyncio.Future[None] = stack.loop.create_future()

    async def stall(name: str, claim: Claim) -> None:
        if name == "after_call" and claim.owner == "worker-0" and not stalled.done():
            stalled.set_result(claim)
            await release

    stack.hook = stall
    task = stack.loop.create_task(stack.executors[0].run_once(limit=1))
    claim = stack.run(stalled)  # worker-0 has its answer, and freezes before committing it
    stack.hook = None
    stack.clock.advance(LEASE_S + 1)
    stack.settle()  # worker-1 takes the step over under attempt + 1 and finishes the order
    assert stack.state(order_id) is final
    before = stack.load(order_id)
    release.set_result(None)
    stack.run(task)
    after = stack.load(order_id)
    assert after == before  # nothing of worker-0's stale result is stored
    mine = [a for a in after.step(claim.step_id).attempts if a.attempt == claim.attempt]
    assert all(a.outcome in (None, "abandoned", "not_sent") for a in mine), mine
    rejected = [
        a for a in stack.audit(order_id) if a.actor == "worker-0" and a.step_id == claim.step_id
    ]
    assert any("reject" in a.action or a.outcome == "rejected" for a in rejected), rejected
    _one_effect_per_key(stack, order_id)


def test_a_stalled_expiry_timer_cannot_decide_after_its_lease_expired(stack: Stack) -> None:
    order_id = _expiry_due(stack)
    [claim] = stack.run(stack.executors[0].claim(limit=1))
    assert claim.kind is K.EXPIRE_RESERVATION
    stack.clock.advance(LEASE_S + 1)
    stack.settle()
    before = stack.load(order_id)
    assert before.order.state is S.PAYMENT_FAILED
    stack.run(stack.executors[0].run_claimed([claim]))
    assert stack.load(order_id) == before


def test_two_executors_competing_for_the_same_steps_run_each_generation_once(
    stack: Stack,
) -> None:
    orders = [stack.create() for _ in range(15)]
    for order_id in orders[::3]:
        stack.sim.script("payments", "charge", ["lost_response"], order_id=str(order_id))
    for order_id in orders[1::3]:
        stack.sim.script("warehouse", "reserve", ["transient", "timeout"], order_id=str(order_id))
    # One claim statement leases every due step it finds (SKIP LOCKED leaves the other claim
    # nothing), so with a limit above the 15 due steps each round went whole to whichever
    # claim ran first: worker-0's, sent first, won every round about once in 40 runs. A limit
    # below what is due leaves the other executor work in the very first round.
    stack.compete(limit=4)
    assert {stack.state(o) for o in orders} == {S.SHIPPED}
    by_worker = set()
    for order_id in orders:
        for step in stack.load(order_id).steps:
            numbers = [a.attempt for a in step.attempts]
            assert numbers == sorted(set(numbers))  # each generation ran once, by one worker
            by_worker |= {a.worker for a in step.attempts}
        _one_effect_per_key(stack, order_id)
        assert len(stack.charges(order_id)) == 1
    assert by_worker == {"worker-0", "worker-1"}  # both really took part
