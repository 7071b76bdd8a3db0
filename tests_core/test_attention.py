"""The attention queue's decision: which change makes an order wait for a person, and why; the
event that says so commits with that change; a person's action takes the order off the queue."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from uuid import UUID

import attrs
import pytest

from orderflow_core import OrderState
from orderflow_core.attention import NEEDS_ATTENTION, AttentionUpdate, decide
from orderflow_core.model import Change, Order, OrderAggregate, Step
from orderflow_core.states import AttentionReason, StepKind, StepStatus
from orderflow_core.steps.registry import STEPS, attention_reason
from orderflow_core.testing import InMemoryOrderStore
from tests_core.world import CUSTOMER, OPERATOR, World

R = AttentionReason
S = OrderState
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def world() -> World:
    w = World()
    yield w
    w.close()


def _memory(w: World) -> InMemoryOrderStore:
    assert isinstance(w.store, InMemoryOrderStore)
    return w.store


def _entering(w: World, order_id: UUID) -> list[Change]:
    """The committed changes of the order that carried an `order.needs_attention` event."""
    return [
        c
        for c in _memory(w).committed
        if any(e.type == NEEDS_ATTENTION and e.order_id == order_id for e in c.events)
    ]


def _stamp(w: World, order_id: UUID) -> tuple[str | None, datetime | None]:
    order = w.load(order_id).order
    return order.attention_reason, order.attention_since


# -- the pure decision -------------------------------------------------------------------------
def _order(**fields: object) -> Order:
    base = Order(
        order_id=UUID(int=1),
        customer_id="c",
        items=(),
        total_minor=100,
        currency="RUB",
        process_version=1,
        state=S.SHIPPING_FAILED,
        created_at=T0,
        updated_at=T0,
    )
    return attrs.evolve(base, **fields)


def _step(kind: StepKind, status: StepStatus, seq: int = 3) -> Step:
    return Step(
        step_id=UUID(int=seq),
        order_id=UUID(int=1),
        kind=kind,
        seq=seq,
        status=status,
        idempotency_key="k",
        created_at=T0,
    )


SHIP_FAILED = _step(StepKind.SHIP, StepStatus.FAILED)


def test_an_order_that_starts_waiting_is_stamped_now_and_announced() -> None:
    order = _order()
    update = decide(order, OrderAggregate(order, (SHIP_FAILED,)), T0 + timedelta(seconds=5), STEPS)
    assert update == AttentionUpdate(R.SHIPPING_FAILED, T0 + timedelta(seconds=5), announce=True)


def test_an_order_that_keeps_waiting_for_the_same_reason_is_left_alone() -> None:
    order = _order(attention_reason="shipping_failed", attention_since=T0)
    later = T0 + timedelta(hours=1)
    assert decide(order, OrderAggregate(order, (SHIP_FAILED,)), later, STEPS) is None


def test_a_new_reason_is_announced_but_keeps_the_time_the_wait_began() -> None:
    order = _order(state=S.PAYMENT_UNKNOWN, attention_reason="expired_while_unknown")
    order = attrs.evolve(order, attention_since=T0)
    gave_up = _step(StepKind.RECONCILE_PAYMENT, StepStatus.FAILED)
    later = T0 + timedelta(minutes=3)
    update = decide(order, OrderAggregate(order, (gave_up,)), later, STEPS)
    assert update == AttentionUpdate(R.RECONCILE_GAVE_UP, T0, announce=True)


def test_an_order_that_no_longer_waits_is_cleared_without_an_event() -> None:
    order = _order(state=S.SHIPPING, attention_reason="shipping_failed", attention_since=T0)
    rearmed = OrderAggregate(order, (_step(StepKind.SHIP, StepStatus.PENDING),))
    assert decide(order, rearmed, T0, STEPS) == AttentionUpdate(None, None, announce=False)


@pytest.mark.parametrize(
    "state", [S.SHIPPED, S.REFUNDED, S.CANCELLED, S.PAYMENT_FAILED, S.RESERVATION_FAILED]
)
def test_a_terminal_order_never_waits(state: OrderState) -> None:
    assert attention_reason(OrderAggregate(_order(state=state), (SHIP_FAILED,))) is None


# -- the reasons, reached through the saga -----------------------------------------------------
def test_a_carrier_refusal_parks_the_order_as_shipping_failed_with_its_event(world: World) -> None:
    world.sim.script("shipping", "ship", ["permanent"])
    order_id = world.create()
    world.settle()
    assert world.state(order_id) is S.SHIPPING_FAILED
    reason, since = _stamp(world, order_id)
    assert reason == "shipping_failed"
    assert since is not None
    [change] = _entering(world, order_id)
    # The stamp, the state change and the event are one change: one transaction (rule 4).
    assert change.order is not None
    assert change.order.attention_reason == "shipping_failed"
    assert [h.to_state for h in change.history] == [S.SHIPPING_FAILED]
    event = next(e for e in change.events if e.type == NEEDS_ATTENTION)
    assert event.payload["reason"] == "shipping_failed"
    assert event.payload["state"] == "shipping_failed"
    assert event.payload["step_kind"] == "ship"
    assert event.payload["last_error"] == "undeliverable"


def test_reserve_retries_exhausted_park_the_order_with_that_reason(world: World) -> None:
    world.sim.script("warehouse", "reserve", ["transient"] * 5)
    order_id = world.create()
    world.settle()
    assert world.state(order_id) is S.RESERVING
    assert _stamp(world, order_id)[0] == "retries_exhausted"
    assert len(_entering(world, order_id)) == 1


def test_a_malformed_warehouse_answer_blocks_the_step_and_parks_the_order(world: World) -> None:
    world.sim.script("warehouse", "release", ["permanent"])
    order_id = world.create()
    world.step()  # reserved
    world.run(world.service.cancel(CUSTOMER, order_id))
    world.settle()
    # A refused release is not a business answer: the release step is blocked.
    assert world.state(order_id) is S.CANCELLING
    assert _stamp(world, order_id)[0] == "blocked"


def test_status_checks_that_give_up_park_the_order_as_reconcile_gave_up(world: World) -> None:
    world.sim.script("payments", "charge", ["pending"])
    world.sim.script("payments", "status", ["transient"] * 5)
    order_id = world.create()
    world.settle()
    assert world.state(order_id) is S.PAYMENT_UNKNOWN
    assert _stamp(world, order_id)[0] == "reconcile_gave_up"


def test_a_hold_that_expires_with_the_payment_in_doubt_parks_the_order(world: World) -> None:
    world.sim.script("payments", "charge", ["pending"])
    world.sim.script("payments", "status", ["transient"] * 3)
    order_id = world.create()
    world.step()  # reserved at t=0: the hold ends at t=900
    world.step()  # charge: pending -> payment_unknown, a status check queued
    assert world.state(order_id) is S.PAYMENT_UNKNOWN
    assert _stamp(world, order_id) == (None, None), "a status check is still due"
    world.clock.advance(895)
    for wait_s in (1, 2, 3):  # status checks at t=895, 896, 898; the next one waits until 902
        assert world.step() == 1
        world.clock.advance(wait_s)
    reconcile = world.load(order_id).latest(StepKind.RECONCILE_PAYMENT)
    assert reconcile is not None
    assert reconcile.status is StepStatus.RETRY_SCHEDULED
    assert world.step() == 1  # t=901: the expiry timer fires and cancels the waiting check
    assert world.state(order_id) is S.PAYMENT_UNKNOWN
    assert _stamp(world, order_id)[0] == "expired_while_unknown"
    assert len(_entering(world, order_id)) == 1


def test_an_operator_reconcile_that_confirms_the_charge_takes_the_order_off_the_queue(
    world: World,
) -> None:
    world.sim.script("payments", "charge", ["pending"])
    world.sim.script("payments", "status", ["transient"] * 5)
    order_id = world.create()
    world.settle()
    assert _stamp(world, order_id)[0] == "reconcile_gave_up"
    charge = world.load(order_id).latest(StepKind.CHARGE)
    assert charge is not None
    world.sim.settle(charge.idempotency_key, "succeeded")
    world.run(world.service.reconcile(OPERATOR, order_id))
    # Queued is enough: a status check will run, so nobody needs to look any more.
    assert _stamp(world, order_id) == (None, None)
    world.settle()
    assert world.state(order_id) is S.SHIPPED
    assert _stamp(world, order_id) == (None, None)


def test_an_operator_retry_of_shipping_takes_the_order_off_the_queue(world: World) -> None:
    world.sim.script("shipping", "ship", ["permanent"])
    order_id = world.create()
    world.settle()
    assert _stamp(world, order_id)[0] == "shipping_failed"
    world.run(world.service.retry(OPERATOR, order_id))
    assert _stamp(world, order_id) == (None, None)
    world.settle()
    assert world.state(order_id) is S.SHIPPED


def test_an_order_that_never_waits_has_no_stamp_and_no_event(world: World) -> None:
    order_id = world.create()
    world.settle()
    assert world.state(order_id) is S.SHIPPED
    assert _entering(world, order_id) == []
    assert all(not c.order or c.order.attention_reason is None for c in _memory(world).committed)


def test_publishing_the_event_logs_a_warning_naming_the_order_and_reason(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.sim.script("shipping", "ship", ["permanent"])
    order_id = world.create()
    world.settle()
    with caplog.at_level(logging.WARNING, logger="orderflow.attention"):
        world.publish()
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(order_id) in line and "shipping_failed" in line for line in lines), lines
