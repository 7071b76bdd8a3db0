"""The attention queue over a real socket on PostgreSQL: who waits, why, since when, newest
waiting first; the event that says so in the feed; leaving the queue; the counts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from api_harness import LiveApi, live, make_world

from orderflow_pg import PgOrderStore

pytestmark = pytest.mark.postgres
ORDERS = "/api/v1/orders"
QUEUE = f"{ORDERS}?needs_attention=true"


@pytest.fixture(params=["postgres", pytest.param("citus", marks=pytest.mark.citus)])
def api(request: pytest.FixtureRequest, run: Any) -> Iterator[LiveApi]:
    """The API over a PostgreSQL store, and over one on a Citus cluster (the whole flow:
    creates, the executor's claims and results, the queue, the feed)."""
    store: PgOrderStore = request.getfixturevalue(
        "citus_store" if request.param == "citus" else "pg_store"
    )
    with live(make_world(store), run=run) as served:
        yield served


def _shipping_failed(api: LiveApi, who: str = "customer", key: str = "k-1") -> str:
    api.world.sim.script("shipping", "ship", ["permanent"])
    order_id: str = api.create(who=who, key=key).body["order_id"]
    api.drive()
    return order_id


def _reserve_gives_up(api: LiveApi, key: str) -> str:
    api.world.sim.script("warehouse", "reserve", ["transient"] * 5)
    order_id: str = api.create(key=key).body["order_id"]
    api.drive(seconds=10)
    return order_id


def _queue(api: LiveApi, who: str = "operator", query: str = "") -> list[dict[str, Any]]:
    reply = api("GET", QUEUE + query, who=who)
    assert reply.status == 200, reply.body
    orders: list[dict[str, Any]] = reply.body["orders"]
    return orders


def test_the_queue_lists_waiting_orders_newest_waiting_first_with_reason_and_since(
    api: LiveApi,
) -> None:
    api.create(key="fine")
    api.drive()
    first = _shipping_failed(api, key="k-1")
    api.world.clock.advance(60)
    second = _reserve_gives_up(api, key="k-2")
    queue = _queue(api)
    assert [o["order_id"] for o in queue] == [second, first]
    assert [o["attention_reason"] for o in queue] == ["retries_exhausted", "shipping_failed"]
    assert all(o["needs_attention"] is True for o in queue)
    assert queue[0]["attention_since"] > queue[1]["attention_since"]
    assert queue[0]["state"] == "reserving"
    # The order itself says the same.
    order = api("GET", f"{ORDERS}/{first}", who="operator").body
    assert (order["needs_attention"], order["attention_reason"]) == (True, "shipping_failed")
    assert order["attention_since"] == queue[1]["attention_since"]


def test_an_order_that_does_not_wait_says_so_in_the_list(api: LiveApi) -> None:
    order_id = api.create().body["order_id"]
    api.drive()
    [listed] = api("GET", ORDERS, who="operator").body["orders"]
    assert listed["order_id"] == order_id
    assert (listed["needs_attention"], listed["attention_reason"]) == (False, None)
    assert listed["attention_since"] is None
    assert _queue(api) == []


def test_a_customer_sees_only_their_own_waiting_orders(api: LiveApi) -> None:
    mine = _shipping_failed(api, who="customer", key="mine")
    _shipping_failed(api, who="other", key="theirs")
    assert [o["order_id"] for o in _queue(api, who="customer")] == [mine]
    assert len(_queue(api, who="operator")) == 2


def test_the_queue_pages_with_its_own_cursor_and_filters_by_state(api: LiveApi) -> None:
    waiting = []
    for n in range(3):
        waiting.append(_shipping_failed(api, key=f"k-{n}"))
        api.world.clock.advance(5)
    stuck = _reserve_gives_up(api, key="stuck")
    page = api("GET", QUEUE + "&limit=2", who="operator").body
    rest = api("GET", QUEUE + f"&limit=2&cursor={page['next_cursor']}", who="operator").body
    listed = [o["order_id"] for o in page["orders"] + rest["orders"]]
    assert listed == [stuck, *reversed(waiting)]
    assert rest["next_cursor"] is None
    only = _queue(api, query="&state=shipping_failed")
    assert [o["order_id"] for o in only] == list(reversed(waiting))


@pytest.mark.parametrize("value", ["false", "1", "TRUE", "yes"])
def test_a_needs_attention_value_other_than_true_is_refused(api: LiveApi, value: str) -> None:
    reply = api("GET", f"{ORDERS}?needs_attention={value}", who="operator")
    assert (reply.status, reply.code) == (400, "invalid_parameter")
    assert "needs_attention" in reply.body["detail"]


def test_the_feed_carries_the_needs_attention_event_of_the_change_that_made_it_wait(
    api: LiveApi,
) -> None:
    order_id = _shipping_failed(api)
    events = api("GET", "/api/v1/events?limit=1000", who="operator").body["events"]
    mine = [e for e in events if e["order_id"] == order_id]
    types = [e["type"] for e in mine]
    assert types.count("order.needs_attention") == 1
    # Committed with the transition that made it wait: right after it, in the same change.
    at = types.index("order.needs_attention")
    assert types[at - 1] == "order.shipping_failed"
    payload = mine[at]["payload"]
    assert payload["reason"] == "shipping_failed"
    assert payload["state"] == "shipping_failed"
    assert payload["step_kind"] == "ship"
    assert payload["last_error"] == "undeliverable"
    order = api("GET", f"{ORDERS}/{order_id}", who="operator").body
    assert payload["since"] == order["attention_since"]


def test_an_operator_retry_takes_the_order_off_the_queue_and_it_ships(api: LiveApi) -> None:
    order_id = _shipping_failed(api)
    assert [o["order_id"] for o in _queue(api)] == [order_id]
    assert api("POST", f"{ORDERS}/{order_id}/retry", who="operator").status == 202
    assert _queue(api) == []
    api.drive()
    order = api("GET", f"{ORDERS}/{order_id}", who="operator").body
    assert (order["state"], order["needs_attention"]) == ("shipped", False)


def test_the_counts_give_every_state_and_reason_to_an_operator_only(api: LiveApi) -> None:
    _shipping_failed(api, key="a")
    api.create(key="b")
    api.drive()
    counts = api("GET", "/api/v1/stats/orders", who="operator")
    assert counts.status == 200
    assert counts.body["total"] == 2
    assert counts.body["by_state"]["shipping_failed"] == 1
    assert counts.body["by_state"]["shipped"] == 1
    assert counts.body["by_state"]["created"] == 0
    assert counts.body["waiting"] == 1
    assert counts.body["waiting_by_reason"]["shipping_failed"] == 1
    assert counts.body["waiting_by_reason"]["blocked"] == 0
    refused = api("GET", "/api/v1/stats/orders", who="customer")
    assert (refused.status, refused.code) == (403, "forbidden")
    assert api("GET", "/api/v1/stats/orders?x=1", who="operator").code == "invalid_parameter"
    assert api("GET", "/api/v1/stats/orders?x=1", who="customer").code == "forbidden"


def test_a_stopped_notification_puts_a_shipped_order_on_the_queue_until_an_operator_retry(
    api: LiveApi,
) -> None:
    api.world.sim.script("notifications", "notify", ["permanent"])
    order_id: str = api.create(key="notify").body["order_id"]
    api.drive()
    [waiting] = _queue(api)
    assert (waiting["order_id"], waiting["state"]) == (order_id, "shipped")
    assert waiting["process_version"] == 2
    assert waiting["attention_reason"] == "notification_failed"
    events = api("GET", "/api/v1/events?limit=1000", who="operator").body["events"]
    [event] = [e for e in events if e["order_id"] == order_id and
               e["type"] == "order.needs_attention"]
    payload = event["payload"]
    assert (payload["step_kind"], payload["step_status"]) == ("notify_customer", "failed")
    assert payload["last_error"] == "undeliverable_address"

    reply = api("POST", f"{ORDERS}/{order_id}/retry", who="customer")
    assert reply.status == 409, reply.body
    assert api("POST", f"{ORDERS}/{order_id}/retry", who="operator").status == 202
    assert _queue(api) == []
    api.drive()
    order = api("GET", f"{ORDERS}/{order_id}", who="operator").body
    assert (order["state"], order["needs_attention"]) == ("shipped", False)
    [message] = api.world.sim.ledger(order_id=order_id)["effects"]["messages"]
    assert message["template"] == "shipped"
