"""The simulated world: pending charges, tombstones, refunds, scripts, the ledger, reset."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from orderflow_core.classify import classify
from orderflow_core.model import Item
from orderflow_core.outcomes import Refused, Succeeded, UnknownOutcome
from orderflow_core.ports import CallContext
from orderflow_mocks.sim_adapters import simulated_services
from tests_core.sim_requests import (
    CHARGE_KEY,
    ITEMS,
    call,
    make_sim,
    prepared,
)


def test_a_pending_charge_stays_pending_until_settled() -> None:
    sim = make_sim()
    sim.script("payments", "charge", ["pending"])
    response = call(sim, "payments", "charge", key=CHARGE_KEY)
    assert (response.status, response.body, response.effect_applied) == (
        202,
        {"status": "pending"},
        True,
    )
    assert classify("charge", response.status, response.body) == UnknownOutcome("charge: pending")
    assert call(sim, "payments", "status").body == {"status": "pending"}
    assert call(sim, "payments", "status").body == {"status": "pending"}
    settled = sim.settle(CHARGE_KEY, "succeeded")
    assert settled["status"] == "succeeded"
    status = call(sim, "payments", "status")
    assert status.body == {"status": "succeeded", "payment_reference": settled["payment_reference"]}
    with pytest.raises(ValueError, match="already succeeded"):
        sim.settle(CHARGE_KEY, "failed")


def test_a_charge_settled_as_failed_reports_failed() -> None:
    sim = make_sim()
    sim.script("payments", "charge", ["pending"])
    call(sim, "payments", "charge", key=CHARGE_KEY)
    sim.settle(CHARGE_KEY, "failed")
    assert call(sim, "payments", "status").body == {"status": "failed"}
    assert sim.ledger()["effects"]["charges"][0]["status"] == "failed"


def test_settling_an_unknown_charge_raises_key_error() -> None:
    with pytest.raises(KeyError):
        make_sim().settle("nobody", "succeeded")


def test_the_status_of_a_key_with_no_charge_is_not_found() -> None:
    response = call(make_sim(), "payments", "status")
    assert (response.status, response.body["code"]) == (404, "not_found")
    assert classify("status", response.status, response.body) == Refused(
        "not_found", "no charge was received under this key"
    )


def test_a_release_before_its_reservation_tombstones_the_key() -> None:
    sim = make_sim()
    released = call(sim, "warehouse", "release", key="release-key")
    assert (released.status, released.body) == (200, {"status": "nothing_to_release"})
    late = call(sim, "warehouse", "reserve", key="reserve-key")
    assert (late.status, late.body["code"]) == (409, "reservation_key_released")
    assert classify("reserve", late.status, late.body) == Refused(
        "reservation_key_released", "this key was released before it was reserved"
    )
    effects = sim.ledger()["effects"]
    assert effects["reservations"] == []
    assert effects["tombstones"] == [{"order_id": "o1", "reservation_key": "reserve-key"}]


def test_a_release_after_the_reservation_releases_it_once() -> None:
    sim = make_sim()
    call(sim, "warehouse", "reserve", key="reserve-key")
    assert call(sim, "warehouse", "release", key="r1").body == {"status": "released"}
    second = call(sim, "warehouse", "release", key="r2")
    assert (second.body, second.effect_applied) == ({"status": "nothing_to_release"}, False)
    assert sim.ledger()["effects"]["reservations"][0]["status"] == "released"


def test_a_refund_above_what_was_charged_is_rejected() -> None:
    sim, body = prepared("refund")
    assert call(sim, "payments", "refund", key="r1", body=body).status == 201
    assert call(sim, "payments", "refund", key="r2", body=body).status == 201
    third = call(sim, "payments", "refund", key="r3", body=body)
    assert (third.status, third.body["code"]) == (409, "refund_rejected")
    unknown = call(sim, "payments", "refund", key="r4", body={**body, "payment_reference": "x"})
    assert unknown.body["code"] == "refund_rejected"


def test_scripts_for_one_order_are_consumed_before_wildcard_ones_then_success() -> None:
    sim = make_sim()
    sim.script("shipping", "ship", ["transient"])
    sim.script("shipping", "ship", ["permanent", "timeout"], order_id="o1")
    o2_body = {"order_id": "o2", "items": ITEMS}
    answers = [
        call(sim, "shipping", "ship", key="k1", order="o1"),
        call(sim, "shipping", "ship", key="k2", order="o2", body=o2_body),
        call(sim, "shipping", "ship", key="k3", order="o1"),
        call(sim, "shipping", "ship", key="k4", order="o1"),
        call(sim, "shipping", "ship", key="k5", order="o2", body=o2_body),
    ]
    assert [(a.status, a.disposition) for a in answers] == [
        (422, "answer"),
        (503, "answer"),
        (504, "timeout"),
        (201, "answer"),
        (201, "answer"),
    ]
    outcomes = [c["outcome"] for c in sim.ledger()["calls"]]
    assert outcomes == ["permanent", "transient", "timeout", "success", "success"]


def test_invalid_scripts_are_refused() -> None:
    sim = make_sim()
    with pytest.raises(ValueError, match="unknown operation"):
        sim.script("warehouse", "charge", ["success"])
    with pytest.raises(ValueError, match="unknown outcome"):
        sim.script("warehouse", "reserve", ["explode"])
    with pytest.raises(ValueError, match="unknown service"):
        sim.script("bank", "reserve", ["success"])


def test_a_malformed_request_is_refused_before_any_script_is_consumed() -> None:
    sim = make_sim()
    sim.script("payments", "charge", ["transient"])
    no_key = call(sim, "payments", "charge", key="")
    bad_body = call(sim, "payments", "charge", body={"order_id": "o1", "amount_minor": True})
    bad_key = call(sim, "payments", "charge", key="has space")
    assert [(r.status, r.body["code"]) for r in (no_key, bad_body, bad_key)] == [
        (400, "idempotency_key_required"),
        (422, "validation_failed"),
        (400, "invalid_idempotency_key"),
    ]
    assert call(sim, "payments", "charge").status == 503


def test_the_ledger_records_each_call_with_the_injected_time_and_filters_by_order() -> None:
    sim = make_sim()
    call(sim, "warehouse", "reserve", key="a", order="o1")
    call(sim, "warehouse", "reserve", key="b", order="o2", body={"order_id": "o2", "items": ITEMS})
    ledger = sim.ledger("o2")
    assert ledger["calls"] == [
        {
            "service": "warehouse",
            "operation": "reserve",
            "idempotency_key": "b",
            "order_id": "o2",
            "step_id": "s1",
            "outcome": "success",
            "effect_applied": True,
            "at": "2030-01-02T03:04:05+00:00",
            "status": 201,
            "replayed": False,
        }
    ]
    assert ledger["effects"]["reservations"] == [
        {"order_id": "o2", "idempotency_key": "b", "reservation_id": "res-id2", "status": "held"}
    ]


def test_reset_forgets_state_scripts_stored_answers_and_the_ledger() -> None:
    sim = make_sim()
    call(sim, "payments", "charge", key=CHARGE_KEY)
    sim.script("payments", "charge", ["transient"])
    sim.reset()
    assert sim.ledger() == {
        "calls": [],
        "effects": {
            "charges": [],
            "reservations": [],
            "shipments": [],
            "refunds": [],
            "tombstones": [],
            "messages": [],
        },
        "scripts": [],
    }
    assert call(sim, "payments", "charge", key=CHARGE_KEY).status == 201


def test_an_unknown_operation_of_a_service_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown operation"):
        make_sim().handle(
            "shipping", "charge", order_id=None, step_id=None, idempotency_key="k", body={}
        )


def test_the_in_process_adapters_classify_like_the_http_clients() -> None:
    sim = make_sim()
    services = simulated_services(sim)
    order_id, step_id = uuid.uuid4(), uuid.uuid4()
    ctx = CallContext(order_id=order_id, step_id=step_id, idempotency_key="charge-1")
    items = [Item("SKU-1", 1, 100)]

    async def scenario() -> list[object]:
        sim.script("payments", "charge", ["lost_response"])
        lost = await services.payments.charge(ctx, 100, "RUB")
        found = await services.payments.charge_status(ctx, "charge-1")
        sim.script("warehouse", "reserve", ["timeout"])
        timed_out = await services.warehouse.reserve(ctx, items)
        shipped = await services.shipping.ship(ctx, items)
        return [lost, found, timed_out, shipped]

    lost, found, timed_out, shipped = asyncio.run(scenario())
    assert isinstance(lost, UnknownOutcome)
    assert isinstance(found, Succeeded)
    assert found.result["status"] == "succeeded"
    assert isinstance(timed_out, UnknownOutcome)
    assert isinstance(shipped, Succeeded)
    calls = sim.ledger(str(order_id))["calls"]
    assert {(c["order_id"], c["step_id"]) for c in calls} == {(str(order_id), str(step_id))}
