"""The transition table end to end on PostgreSQL over HTTP: every allowed transition is reached by
a real scenario, and every command the table refuses answers 409 through the API."""

from __future__ import annotations

from uuid import UUID

import pytest

from acceptance.stack import Stack
from orderflow_core import TRANSITIONS, OrderState
from tests_core.reach import REACHERS
from tests_core.scenarios import SCENARIOS
from tests_core.world import CUSTOMER, OPERATOR

pytestmark = pytest.mark.postgres
S = OrderState

# Which states each command is refused in with 409 invalid_transition (docs/lifecycle.md).
CANCEL_OK = {"created", "reserving_stopped", "reserved", "cancelling", "cancelled"}
RECONCILE_OK = {"payment_unknown"}
REFUND_OK = {"shipped", "shipping_failed"}


def _reached(stack: Stack) -> set[tuple[S, S]]:
    return {
        (S(a), S(b)) for o in stack.order_ids for a, b in stack.states_visited(o) if a is not None
    }


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_named_scenario_ends_where_the_lifecycle_says_on_the_real_stack(
    stack: Stack, name: str
) -> None:
    SCENARIOS[name](stack)  # type: ignore[arg-type]  # Stack speaks World's language
    reached = _reached(stack)
    assert reached
    assert reached <= set(TRANSITIONS[1])


def test_every_allowed_transition_is_reached_end_to_end(stack: Stack) -> None:
    for scenario in SCENARIOS.values():
        scenario(stack)  # type: ignore[arg-type]
    assert _reached(stack) == set(TRANSITIONS[1])


def _reach(stack: Stack, name: str) -> UUID:
    how, hook = REACHERS[name]  # the core's reachers, each with its crash hook
    stack.hook = hook  # type: ignore[assignment]  # the reachers' crash hooks fit
    order_id = how(stack)  # type: ignore[arg-type]
    stack.hook = None
    if name == "cancelled":
        order_id = stack.create()
        stack.run(stack.service.cancel(CUSTOMER, order_id))
    return order_id


@pytest.mark.parametrize("name", sorted(REACHERS))
def test_every_refused_command_answers_409_invalid_transition_through_the_api(
    stack: Stack, name: str
) -> None:
    order_id = _reach(stack, name)
    if name == "refunded":
        stack.run(stack.service.request_refund(OPERATOR, order_id, "r-1", None, "lost"))
        stack.settle()
    before = stack.load(order_id)
    path = f"/api/v1/orders/{order_id}"
    refused = []
    if name not in CANCEL_OK:
        refused.append(stack.call("POST", f"{path}/cancel", who="customer"))
    if name not in RECONCILE_OK:
        refused.append(stack.call("POST", f"{path}/reconcile", who="operator"))
    if name not in REFUND_OK:
        body = {"amount_minor": 100, "reason": "goodwill"}
        refused.append(stack.call("POST", f"{path}/refunds", who="operator", key="k", body=body))
    assert refused, name
    for reply in refused:
        assert reply.status == 409, (name, reply.body)
        assert reply.code == "invalid_transition", (name, reply.body)
        assert reply.body["current_state"] == before.order.state.value
    # A refused command changes nothing.
    assert stack.load(order_id) == before
