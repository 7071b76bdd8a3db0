"""The operator's endpoints over a real socket: refunds, the audit log, the event feed; and the
public ones: health, readiness, the OpenAPI document."""

from __future__ import annotations

import logging

import pytest
from api_harness import LiveApi, Reply, live, make_world

from orderflow_core.errors import StoreUnavailable

ORDERS = "/api/v1/orders"


def _shipping_failed(api: LiveApi) -> str:
    api.world.sim.script("shipping", "ship", ["permanent"])
    order_id: str = api.create().body["order_id"]
    api.drive()
    return order_id


def _refund(api: LiveApi, order_id: str, key: str = "refund-1", **body: object) -> Reply:
    return api(
        "POST",
        f"{ORDERS}/{order_id}/refunds",
        who="operator",
        key=key,
        body={"reason": "parcel lost", **body},
    )


def test_a_full_refund_after_a_shipping_failure_is_accepted_and_then_refunds_the_order() -> None:
    with live() as api:
        order_id = _shipping_failed(api)
        reply = _refund(api, order_id)
        assert reply.status == 202
        refund = reply.body
        assert (refund["amount_minor"], refund["status"]) == (3000, "requested")
        assert refund["requested_by"] == "order_operator"
        api.drive()
        order = api("GET", f"{ORDERS}/{order_id}").body
        assert order["state"] == "refunded"
        assert [r["status"] for r in order["refunds"]] == ["succeeded"]


def test_a_refund_request_replayed_with_its_key_returns_the_same_refund() -> None:
    with live() as api:
        order_id = _shipping_failed(api)
        first = _refund(api, order_id, amount_minor=1000)
        again = _refund(api, order_id, amount_minor=1000)
        assert again.status == 202
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.body["refund_id"] == first.body["refund_id"]
        aggregate = next(iter(api.world.memory.aggregates.values()))
        assert len(aggregate.refunds) == 1


def test_a_refund_key_reused_with_another_body_is_refused() -> None:
    with live() as api:
        order_id = _shipping_failed(api)
        _refund(api, order_id, amount_minor=1000)
        reply = _refund(api, order_id, amount_minor=999)
        assert (reply.status, reply.code) == (422, "idempotency_key_reused")


def test_a_refund_above_what_is_left_is_a_validation_error() -> None:
    with live() as api:
        order_id = _shipping_failed(api)
        _refund(api, order_id, key="a", amount_minor=2000)
        reply = _refund(api, order_id, key="b", amount_minor=1001)
        assert (reply.status, reply.code) == (422, "validation_failed")
        assert reply.body["errors"][0]["field"] == "amount_minor"
        assert _refund(api, order_id, key="c", amount_minor=1000).status == 202


def test_a_refund_before_the_order_was_paid_is_an_invalid_transition() -> None:
    with live() as api:
        order_id = api.create().body["order_id"]
        reply = _refund(api, order_id)
        assert (reply.status, reply.code) == (409, "invalid_transition")
        assert reply.body["current_state"] == "created"
        assert reply.body["requested"] == "refund"


def test_a_refund_needs_its_idempotency_key() -> None:
    with live() as api:
        order_id = _shipping_failed(api)
        missing = api("POST", f"{ORDERS}/{order_id}/refunds", who="operator", body={"reason": "x"})
        assert (missing.status, missing.code) == (400, "idempotency_key_required")
        bad = _refund(api, order_id, key="has space")
        assert (bad.status, bad.code) == (400, "invalid_idempotency_key")


def test_the_audit_log_lists_what_happened_oldest_first() -> None:
    with live() as api:
        order_id = _shipping_failed(api)
        _refund(api, order_id)
        reply = api("GET", f"{ORDERS}/{order_id}/audit", who="operator")
        assert reply.status == 200
        entries = reply.body["entries"]
        assert entries[0]["action"] == "order.created"
        assert any(e["action"] == "manual.refund" for e in entries)
        assert [e["at"] for e in entries] == sorted(e["at"] for e in entries)


def test_the_event_feed_pages_oldest_first_and_says_where_to_continue() -> None:
    with live() as api:
        api.create()
        api.drive()
        everything = api("GET", "/api/v1/events", who="operator").body
        seqs = [e["seq"] for e in everything["events"]]
        assert seqs == sorted(seqs)
        assert everything["next_after"] == seqs[-1]
        first = api("GET", "/api/v1/events?limit=2", who="operator").body
        rest = api("GET", f"/api/v1/events?after={first['next_after']}", who="operator").body
        assert [e["seq"] for e in first["events"] + rest["events"]] == seqs
        assert everything["events"][0]["type"] == "order.created"


def test_an_empty_event_page_keeps_the_position() -> None:
    with live() as api:
        reply = api("GET", "/api/v1/events?after=7", who="operator")
        assert reply.body == {"events": [], "next_after": 7}


def test_health_answers_200_without_a_token() -> None:
    with live() as api:
        reply = api("GET", "/healthz", who=None)
        assert (reply.status, reply.body) == (200, {"status": "ok"})


def test_readiness_follows_the_readiness_check() -> None:
    ready = {"now": True}

    async def check() -> bool:
        return ready["now"]

    with live(make_world(), readiness=check) as api:
        assert api("GET", "/readyz", who=None).status == 200
        ready["now"] = False
        reply = api("GET", "/readyz", who=None)
        assert (reply.status, reply.code) == (503, "not_ready")


def test_a_readiness_check_that_raises_means_not_ready() -> None:
    async def broken() -> bool:
        raise ConnectionError("database down")

    with live(make_world(), readiness=broken) as api:
        reply = api("GET", "/readyz", who=None)
        assert (reply.status, reply.code) == (503, "not_ready")
        assert "database down" not in str(reply.body)


def test_the_openapi_document_is_served_to_anyone() -> None:
    with live() as api:
        reply = api("GET", "/api/v1/openapi.json", who=None)
        assert reply.status == 200
        assert reply.body["openapi"].startswith("3.1")
        assert "/api/v1/orders/{order_id}/refunds" in reply.body["paths"]


def test_a_store_outage_during_readiness_is_one_log_line_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def down() -> bool:
        raise StoreUnavailable("migrations_current: OperationalError: connection refused")

    with caplog.at_level(logging.INFO), live(make_world(), readiness=down) as api:
        reply = api("GET", "/readyz", who=None)
    assert (reply.status, reply.code) == (503, "not_ready")
    assert "OperationalError" not in str(reply.body)
    logged = [r for r in caplog.records if "connection refused" in r.getMessage()]
    assert [r.exc_info for r in logged] == [None]
