"""Every audit entry, history entry and event names who caused it: the user whose token made
the request (`<role>:<user>`), or the worker whose step did."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orderflow_core import OrderState
from tests_core.world import CUSTOMER, OPERATOR, World


@pytest.fixture
def world() -> Iterator[World]:
    w = World()
    yield w
    w.close()


def test_events_audit_and_history_name_the_user_or_the_worker_that_acted(world: World) -> None:
    order_id = world.create()
    world.settle()
    assert world.state(order_id) is OrderState.SHIPPED
    world.run(world.service.request_refund(OPERATOR, order_id, "refund-1", None, "lost"))
    world.settle()
    world.publish()

    events = world.run(world.store.events(after=0, limit=1000))
    actors = {e.type: e.payload["actor"] for e in events if e.order_id == order_id}
    assert actors["order.created"] == f"customer:{CUSTOMER.user_id}"
    assert actors["refund.requested"] == f"operator:{OPERATOR.user_id}"
    assert actors["order.shipped"] == "worker-0"
    assert all("actor" in e.payload for e in events), "an event without its actor"

    audit = world.run(world.store.audit_entries(order_id))
    by_action = {a.action: a.actor for a in audit}
    assert by_action["order.created"] == f"customer:{CUSTOMER.user_id}"
    assert by_action["manual.refund"] == f"operator:{OPERATOR.user_id}"
    history = world.run(world.store.history(order_id))
    assert history[0].actor == f"customer:{CUSTOMER.user_id}"
    assert history[-1].actor == "worker-0"


def test_a_cancel_names_the_customer_who_cancelled(world: World) -> None:
    order_id = world.create()
    world.run(world.service.cancel(CUSTOMER, order_id))
    world.publish()
    events = world.run(world.store.events(after=0, limit=100))
    cancelled = [e for e in events if e.type == "order.cancelled"]
    assert [e.payload["actor"] for e in cancelled] == [f"customer:{CUSTOMER.user_id}"]
