"""Process version 2: after the carrier confirmed, the customer is notified through the fourth
simulated service; the order is `shipped` either way, and a notification that cannot be sent
puts the order on the attention list without changing its state."""

from __future__ import annotations

import random
from collections.abc import Iterator
from uuid import UUID

import attrs
import pytest

from orderflow_core import OrderState, StepKind, StepStatus, saga
from orderflow_core.context import Context
from orderflow_core.errors import NotRetryable
from orderflow_core.model import Step
from orderflow_core.outcomes import Succeeded
from orderflow_core.service import OrderService
from orderflow_core.states import AttentionReason
from orderflow_core.testing import InMemoryUsers
from tests_core.world import CUSTOMER, OPERATOR, World, sequential_ids


@pytest.fixture
def world() -> Iterator[World]:
    w = World(process_version=2)
    yield w
    w.close()


def notify_step(w: World, order_id: UUID) -> Step:
    [step] = w.load(order_id).steps_of(StepKind.NOTIFY_CUSTOMER)
    return step


def messages(w: World, order_id: UUID) -> list[dict[str, object]]:
    found: list[dict[str, object]] = w.sim.ledger(order_id=str(order_id))["effects"]["messages"]
    return found


def waiting(w: World) -> list[UUID]:
    page, _ = w.run(w.service.waiting_orders(OPERATOR, state=None, limit=100, cursor=None))
    return [o.order_id for o in page]


def test_a_version_2_order_is_shipped_and_then_its_customer_notified_once(world: World) -> None:
    order_id = world.create()
    world.settle()
    aggregate = world.load(order_id)
    assert aggregate.order.process_version == 2
    assert aggregate.order.state is OrderState.SHIPPED
    step = notify_step(world, order_id)
    assert step.status is StepStatus.SUCCEEDED
    [message] = messages(world, order_id)
    assert message["template"] == "shipped"
    assert message["idempotency_key"] == step.idempotency_key
    [call] = [c for c in world.sim.ledger(order_id=str(order_id))["calls"]
              if c["service"] == "notifications"]
    assert (call["operation"], call["step_id"]) == ("notify", str(step.step_id))
    # The step keeps the service's answer; the event names the template and the message.
    assert step.result == {"message_id": message["message_id"], "status": "sent"}
    assert world.publish() > 0
    events = world.run(world.service.events(OPERATOR, after=0, limit=100))
    [notified] = [e for e in events if e.order_id == order_id and e.type == "customer.notified"]
    assert (notified.payload["template"], notified.payload["message_id"]) == (
        "shipped",
        message["message_id"],
    )
    assert world.states_visited(order_id)[-1] == ("shipping", "shipped")


def test_the_notification_runs_only_once_the_carrier_confirmed(world: World) -> None:
    order_id = world.create()
    world.sim.script("shipping", "ship", ["transient"], order_id=str(order_id))
    for _ in range(3):  # reserve, charge, the ship attempt that fails
        world.step()
    assert world.state(order_id) is OrderState.SHIPPING
    assert not list(world.load(order_id).steps_of(StepKind.NOTIFY_CUSTOMER))
    world.settle()
    assert notify_step(world, order_id).status is StepStatus.SUCCEEDED


def test_a_transient_notification_is_retried_under_the_same_key(world: World) -> None:
    order_id = world.create()
    world.sim.script(
        "notifications", "notify", ["transient", "timeout", "lost_response"], str(order_id)
    )
    world.settle()
    step = notify_step(world, order_id)
    assert step.status is StepStatus.SUCCEEDED
    assert [a.outcome for a in step.attempts][-1] == "succeeded"
    assert len(step.attempts) == 4
    keys = {c["idempotency_key"] for c in world.sim.ledger(order_id=str(order_id))["calls"]
            if c["service"] == "notifications"}
    assert keys == {step.idempotency_key}
    assert len(messages(world, order_id)) == 1  # the lost response's replay sent nothing twice
    assert world.state(order_id) is OrderState.SHIPPED


@pytest.mark.parametrize(
    ("outcomes", "status", "error"),
    [
        (["permanent"], StepStatus.FAILED, "undeliverable_address"),  # the refusal's code
        (["transient"] * 5, StepStatus.FAILED, None),
    ],
    ids=["refused", "exhausted"],
)
def test_a_notification_that_stops_puts_the_shipped_order_on_the_attention_list(
    world: World, outcomes: list[str], status: StepStatus, error: str | None
) -> None:
    order_id = world.create()
    world.sim.script("notifications", "notify", outcomes, str(order_id))
    world.settle()
    aggregate = world.load(order_id)
    assert aggregate.order.state is OrderState.SHIPPED
    stopped = notify_step(world, order_id)
    assert stopped.status is status
    if error is not None:
        assert stopped.last_error == error
    assert stopped.result == {}  # nothing the service answered is kept
    assert aggregate.order.attention_reason == AttentionReason.NOTIFICATION_FAILED
    assert waiting(world) == [order_id]
    assert messages(world, order_id) == []

    with pytest.raises(NotRetryable, match=r"^only an operator may retry the notification$"):
        world.run(world.service.retry(CUSTOMER, order_id))
    world.run(world.service.retry(OPERATOR, order_id))
    world.settle()
    assert notify_step(world, order_id).status is StepStatus.SUCCEEDED
    assert world.load(order_id).order.attention_reason is None
    assert waiting(world) == []
    assert world.state(order_id) is OrderState.SHIPPED
    assert len(messages(world, order_id)) == 1


def test_without_a_notification_service_the_step_is_blocked_and_the_order_waits() -> None:
    w = World(process_version=2)
    try:
        no_notifications = attrs.evolve(w.services, notifications=None)
        for executor in w.executors:
            executor.services = no_notifications
        order_id = w.create()
        w.settle()
        assert w.state(order_id) is OrderState.SHIPPED
        step = notify_step(w, order_id)
        assert step.status is StepStatus.BLOCKED
        assert step.last_error == "no notification service is configured"
        assert w.load(order_id).order.attention_reason == AttentionReason.NOTIFICATION_FAILED
    finally:
        w.close()


def test_a_version_1_order_never_notifies() -> None:
    w = World(process_version=1)
    try:
        order_id = w.create()
        w.settle()
        assert w.state(order_id) is OrderState.SHIPPED
        assert not list(w.load(order_id).steps_of(StepKind.NOTIFY_CUSTOMER))
        assert w.sim.ledger()["effects"]["messages"] == []
    finally:
        w.close()


def test_orders_keep_their_version_whatever_the_service_now_creates() -> None:
    """Both versions run side by side on one store: each order to the end on its own."""
    w = World(process_version=1)
    try:
        old = w.create()
        w.step()  # reserve: the version-1 order is in flight
        w.service = OrderService(w.store, w.clock, InMemoryUsers(), process_version=2)
        new = w.create()
        w.settle()
        assert [w.load(o).order.process_version for o in (old, new)] == [1, 2]
        assert [w.state(o) for o in (old, new)] == [OrderState.SHIPPED] * 2
        assert not list(w.load(old).steps_of(StepKind.NOTIFY_CUSTOMER))
        assert notify_step(w, new).status is StepStatus.SUCCEEDED
        assert messages(w, old) == []
    finally:
        w.close()


def test_an_unknown_process_version_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match=r"unknown process version 9; known: \[1, 2\]"):
        OrderService(None, None, InMemoryUsers(), process_version=9)  # type: ignore[arg-type]


def test_a_step_kind_outside_the_orders_process_version_is_refused_naming_both() -> None:
    """A claim of a kind its order's version does not define (a v1 order has no notification)
    is a programming error, refused before anything is decided, naming version and kind."""
    w = World(process_version=1)
    try:
        w.create()
        [claim] = w.run(w.store.claim_due(owner="worker-0", now=w.clock.now(), limit=1, lease_s=30))
        aggregate = w.load(claim.order_id)
        foreign = attrs.evolve(claim, kind=StepKind.NOTIFY_CUSTOMER)
        draw = random.Random(0).random
        ctx = Context(w.clock.now(), "worker-0", w.timing, sequential_ids(), draw)
        with pytest.raises(ValueError, match=r"^process version 1 has no notify_customer step$"):
            saga.decide_start(aggregate, foreign, ctx)
        with pytest.raises(ValueError, match=r"^process version 1 has no notify_customer step$"):
            saga.decide_result(aggregate, foreign, Succeeded({"message_id": "m"}), ctx)
    finally:
        w.close()
