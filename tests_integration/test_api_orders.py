"""The order endpoints over a real socket: create, read, list, cancel, retry, reconcile."""

from __future__ import annotations

from api_harness import LiveApi, live

ORDERS = "/api/v1/orders"


def _url(order_id: str, suffix: str = "") -> str:
    return f"{ORDERS}/{order_id}{suffix}"


def _reserved(api: LiveApi, key: str = "key-1") -> str:
    order_id: str = api.create(key=key).body["order_id"]
    api.run(api.world.executor.run_once())
    return order_id


def test_creating_an_order_answers_202_with_its_location_and_the_order() -> None:
    with live() as api:
        reply = api.create()
        order_id = reply.body["order_id"]
        assert reply.headers["Location"] == _url(order_id)
        assert "Idempotent-Replayed" not in reply.headers
        assert reply.body["state"] == "created"
        assert reply.body["total_minor"] == 3000
        assert reply.body["current_step"]["kind"] == "reserve"
        # What the customer may ask now, decided by the service: cancel, before anything ran.
        assert reply.body["allowed_actions"] == ["cancel"]
        assert reply.body["payment"] == {
            "status": "none",
            "reference": None,
            "idempotency_key": None,
            "amount_minor": 3000,
            "currency": "RUB",
        }
        assert len(api.world.memory.aggregates) == 1


def test_a_shipped_order_shows_its_history_steps_attempts_and_payment() -> None:
    with live() as api:
        order_id = api.create().body["order_id"]
        api.drive()
        body = api("GET", _url(order_id)).body
        assert body["state"] == "shipped"
        assert [(h["from"], h["to"]) for h in body["history"]] == [
            (None, "created"),
            ("created", "reserving"),
            ("reserving", "reserved"),
            ("reserved", "paying"),
            ("paying", "paid"),
            ("paid", "shipping"),
            ("shipping", "shipped"),
        ]
        assert all(h["at"].endswith("Z") and h["actor"] and h["reason"] for h in body["history"])
        charge = next(s for s in body["steps"] if s["kind"] == "charge")
        assert body["payment"]["status"] == "succeeded"
        assert body["payment"]["reference"]
        assert body["payment"]["idempotency_key"] == charge["idempotency_key"]
        assert charge["attempts"][0]["outcome"] == "succeeded"
        assert charge["attempts"][0]["worker"] == "test-worker"
        assert body["current_step"]["kind"] == "ship"
        assert body["reservation"]["status"] == "held"
        assert body["allowed_actions"] == []  # a customer: nothing to ask of a shipped order
        operator = api("GET", _url(order_id), who="operator").body
        assert operator["allowed_actions"] == ["refund"]


def test_an_operator_reads_any_order() -> None:
    with live() as api:
        order_id = api.create().body["order_id"]
        assert api("GET", _url(order_id), who="operator").body["order_id"] == order_id


def test_the_list_pages_newest_first_with_a_cursor() -> None:
    with live() as api:
        created = []
        for n in range(5):
            created.append(api.create(key=f"k{n}").body["order_id"])
            api.world.clock.advance(1)
        seen: list[str] = []
        cursor = ""
        while True:
            reply = api("GET", f"{ORDERS}?limit=2{cursor}")
            seen.extend(o["order_id"] for o in reply.body["orders"])
            if reply.body["next_cursor"] is None:
                break
            cursor = f"&cursor={reply.body['next_cursor']}"
        assert seen == list(reversed(created))


def test_the_list_shows_a_customer_only_their_own_orders_and_an_operator_all() -> None:
    with live() as api:
        mine = api.create().body["order_id"]
        theirs = api.create(who="other").body["order_id"]
        assert [o["order_id"] for o in api("GET", ORDERS).body["orders"]] == [mine]
        everyone = {o["order_id"] for o in api("GET", ORDERS, who="operator").body["orders"]}
        assert everyone == {mine, theirs}


def test_the_list_filters_by_state() -> None:
    with live() as api:
        shipped = api.create(key="a").body["order_id"]
        api.drive()
        waiting = api.create(key="b").body["order_id"]
        assert [o["order_id"] for o in api("GET", f"{ORDERS}?state=shipped").body["orders"]] == [
            shipped
        ]
        created = api("GET", f"{ORDERS}?state=created&limit=100").body["orders"]
        assert [o["order_id"] for o in created] == [waiting]


def test_cancelling_before_the_reserve_step_started_cancels_at_once_with_200() -> None:
    with live() as api:
        order_id = api.create().body["order_id"]
        reply = api("POST", _url(order_id, "/cancel"))
        assert reply.status == 200
        assert reply.body["state"] == "cancelled"


def test_cancelling_again_answers_200_and_changes_nothing() -> None:
    with live() as api:
        order_id = api.create().body["order_id"]
        api("POST", _url(order_id, "/cancel"))
        store = api.world.memory
        before = (dict(store.aggregates), len(store.outbox), len(store.audit_log))
        reply = api("POST", _url(order_id, "/cancel"))
        assert (reply.status, reply.body["state"]) == (200, "cancelled")
        assert (dict(store.aggregates), len(store.outbox), len(store.audit_log)) == before


def test_cancelling_a_reserved_order_answers_202_and_releases_first() -> None:
    with live() as api:
        order_id = _reserved(api)
        reply = api("POST", _url(order_id, "/cancel"))
        assert (reply.status, reply.body["state"]) == (202, "cancelling")
        assert reply.body["current_step"]["kind"] == "release_reservation"
        api.drive()
        assert api("GET", _url(order_id)).body["state"] == "cancelled"


def test_cancelling_a_shipped_order_is_an_invalid_transition() -> None:
    with live() as api:
        order_id = api.create().body["order_id"]
        api.drive()
        reply = api("POST", _url(order_id, "/cancel"))
        assert (reply.status, reply.code) == (409, "invalid_transition")
        assert reply.body["current_state"] == "shipped"
        assert reply.body["requested"] == "cancelled"


def test_a_customer_retries_a_step_whose_retries_ran_out() -> None:
    with live() as api:
        api.world.sim.script("warehouse", "reserve", ["transient"] * 5)
        order_id = api.create().body["order_id"]
        api.drive(seconds=8)
        before = api("GET", _url(order_id)).body["current_step"]
        assert (before["status"], before["attempt"]) == ("failed", 5)
        waiting = api("GET", _url(order_id)).body
        assert waiting["allowed_actions"] == ["cancel", "retry"]
        reply = api("POST", _url(order_id, "/retry"))
        assert reply.status == 202
        assert reply.body["allowed_actions"] == []  # re-armed: nothing to ask until it stops
        step = reply.body["current_step"]
        assert (step["status"], step["max_attempts"]) == ("pending", 10)
        assert step["idempotency_key"] == before["idempotency_key"]
        api.drive()
        assert api("GET", _url(order_id)).body["state"] == "shipped"


def test_retrying_a_step_that_did_not_fail_is_not_retryable() -> None:
    with live() as api:
        order_id = api.create().body["order_id"]
        reply = api("POST", _url(order_id, "/retry"))
        assert (reply.status, reply.code) == (409, "not_retryable")


def test_an_operator_retries_shipping_after_the_carrier_refused() -> None:
    with live() as api:
        api.world.sim.script("shipping", "ship", ["permanent"])
        order_id = api.create().body["order_id"]
        api.drive()
        assert api("GET", _url(order_id)).body["state"] == "shipping_failed"
        assert api("GET", _url(order_id)).body["allowed_actions"] == []
        operator = api("GET", _url(order_id), who="operator").body["allowed_actions"]
        assert operator == ["retry", "refund"]
        refused = api("POST", _url(order_id, "/retry"))
        assert (refused.status, refused.code) == (409, "not_retryable")
        reply = api("POST", _url(order_id, "/retry"), who="operator")
        assert (reply.status, reply.body["state"]) == (202, "shipping")
        api.drive()
        assert api("GET", _url(order_id)).body["state"] == "shipped"


def test_an_operator_queues_a_reconciliation_of_an_unknown_payment() -> None:
    with live() as api:
        api.world.sim.script("payments", "charge", ["pending"])
        api.world.sim.script("payments", "status", ["transient"] * 5)
        order_id = api.create().body["order_id"]
        api.drive(seconds=8)
        assert api("GET", _url(order_id)).body["state"] == "payment_unknown"
        # The status checks gave up: retrying them (a read) or a new reconcile are open; the
        # charge itself is never re-armed while it may have taken money (its kind says so).
        operator = api("GET", _url(order_id), who="operator").body["allowed_actions"]
        assert operator == ["retry", "reconcile"]
        reply = api("POST", _url(order_id, "/reconcile"), who="operator")
        assert (reply.status, reply.body["state"]) == (202, "payment_unknown")
        assert reply.body["current_step"]["kind"] == "reconcile_payment"
        assert reply.body["current_step"]["status"] == "pending"


def test_reconciling_outside_payment_unknown_is_an_invalid_transition() -> None:
    with live() as api:
        order_id = api.create().body["order_id"]
        reply = api("POST", _url(order_id, "/reconcile"), who="operator")
        assert (reply.status, reply.code) == (409, "invalid_transition")
        assert reply.body["current_state"] == "created"


def test_an_unknown_order_is_not_found_for_every_order_endpoint() -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    with live() as api:
        for method, suffix, who in [
            ("GET", "", "customer"),
            ("POST", "/cancel", "customer"),
            ("POST", "/retry", "customer"),
            ("POST", "/reconcile", "operator"),
            ("GET", "/audit", "operator"),
        ]:
            reply = api(method, _url(missing, suffix), who=who)
            assert (reply.status, reply.code) == (404, "not_found"), (method, suffix)
        reply = api(
            "POST",
            _url(missing, "/refunds"),
            who="operator",
            key="r",
            body={"reason": "x"},
        )
        assert (reply.status, reply.code) == (404, "not_found")
