"""The in-process simulated services of CONTRACT §4 and the shared classification table."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from orderflow_core.classify import classify
from orderflow_core.model import Item
from orderflow_core.outcomes import Broken, Refused, Succeeded, Transient, UnknownOutcome
from orderflow_core.ports import CallContext
from orderflow_core.testing.sim_adapters import simulated_services
from orderflow_core.testing.sim_world import PERMANENT_ANSWERS
from orderflow_core.testing.simulation import SimResponse, Simulator

OPERATIONS = [
    ("warehouse", "reserve"),
    ("warehouse", "release"),
    ("payments", "charge"),
    ("payments", "status"),
    ("payments", "refund"),
    ("shipping", "ship"),
]
MUTATING = [(s, op) for s, op in OPERATIONS if op != "status"]
CHARGE_KEY = "charge-key"
ITEMS = [{"sku": "SKU-1", "quantity": 2, "unit_price_minor": 500}]


def make_sim() -> Simulator:
    counter = itertools.count(1)
    return Simulator(
        now=lambda: datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC), new_id=lambda: f"id{next(counter)}"
    )


def body_for(operation: str, reference: str = "") -> dict[str, Any]:
    return {
        "reserve": {"order_id": "o1", "items": ITEMS},
        "release": {"order_id": "o1", "reservation_key": "reserve-key"},
        "charge": {"order_id": "o1", "amount_minor": 1000, "currency": "RUB"},
        "status": {},
        "refund": {"order_id": "o1", "payment_reference": reference, "amount_minor": 400},
        "ship": {"order_id": "o1", "items": ITEMS},
    }[operation]


def call(
    sim: Simulator,
    service: str,
    operation: str,
    *,
    key: str = "k1",
    order: str = "o1",
    body: dict[str, Any] | None = None,
) -> SimResponse:
    return sim.handle(
        service,
        operation,
        order_id=order,
        step_id="s1",
        idempotency_key=key,
        body=body if body is not None else body_for(operation),
        path_key=CHARGE_KEY if operation == "status" else None,
    )


def prepared(operation: str) -> tuple[Simulator, dict[str, Any]]:
    """A simulator in which `operation` can succeed, and the body to call it with."""
    sim = make_sim()
    if operation not in ("status", "refund"):
        return sim, body_for(operation)
    charged = call(sim, "payments", "charge", key=CHARGE_KEY)
    return sim, body_for(operation, charged.body["payment_reference"])


def effect_count(sim: Simulator) -> int:
    effects = sim.ledger()["effects"]
    return sum(len(rows) for rows in effects.values())


@pytest.mark.parametrize(("service", "operation"), OPERATIONS)
def test_a_successful_call_answers_2xx_and_applies_its_effect_once(
    service: str, operation: str
) -> None:
    sim, body = prepared(operation)
    before = effect_count(sim)
    response = call(sim, service, operation, body=body)
    assert 200 <= response.status < 300
    assert response.disposition == "answer"
    assert response.effect_applied is (operation != "status")
    assert effect_count(sim) == before + (operation != "status")
    assert isinstance(classify(operation, response.status, response.body), Succeeded)


@pytest.mark.parametrize(("service", "operation"), OPERATIONS)
def test_a_transient_outcome_answers_503_with_retry_after_and_touches_nothing(
    service: str, operation: str
) -> None:
    sim, body = prepared(operation)
    before = effect_count(sim)
    sim.script(service, operation, ["transient"], retry_after_s=7)
    response = call(sim, service, operation, body=body)
    assert (response.status, response.retry_after_s, response.effect_applied) == (503, 7, False)
    assert effect_count(sim) == before
    assert classify(operation, response.status, response.body, 7) == Transient(
        detail=f"{operation}: HTTP 503", retry_after_s=7
    )
    assert call(sim, service, operation, body=body).status < 300  # the key was not consumed


@pytest.mark.parametrize(("service", "operation"), OPERATIONS)
def test_a_permanent_outcome_answers_the_refusal_and_touches_nothing(
    service: str, operation: str
) -> None:
    sim, body = prepared(operation)
    before = effect_count(sim)
    sim.script(service, operation, ["permanent"])
    response = call(sim, service, operation, body=body)
    status, code = PERMANENT_ANSWERS[operation]
    assert (response.status, response.body["code"]) == (status, code)
    assert not response.effect_applied
    assert effect_count(sim) == before
    outcome = classify(operation, response.status, response.body)
    if operation in ("release", "status"):  # no business refusal exists: a person must look
        assert isinstance(outcome, Broken)
    else:
        assert outcome == Refused(code=code, detail="scripted permanent refusal")


@pytest.mark.parametrize(("service", "operation"), OPERATIONS)
def test_a_timeout_answers_nothing_and_applies_nothing(service: str, operation: str) -> None:
    sim, body = prepared(operation)
    before = effect_count(sim)
    sim.script(service, operation, ["timeout"])
    response = call(sim, service, operation, body=body)
    assert (response.disposition, response.effect_applied) == ("timeout", False)
    assert effect_count(sim) == before
    assert call(sim, service, operation, body=body).effect_applied is (operation != "status")


@pytest.mark.parametrize(("service", "operation"), OPERATIONS)
def test_a_lost_response_applies_the_effect_and_its_replay_returns_the_same_answer(
    service: str, operation: str
) -> None:
    sim, body = prepared(operation)
    before = effect_count(sim)
    sim.script(service, operation, ["lost_response"])
    lost = call(sim, service, operation, body=body)
    assert lost.disposition == "lost_response"
    assert lost.effect_applied is (operation != "status")
    assert effect_count(sim) == before + (operation != "status")
    replay = call(sim, service, operation, body=body)
    assert (replay.status, replay.body, replay.effect_applied) == (lost.status, lost.body, False)
    assert effect_count(sim) == before + (operation != "status")


@pytest.mark.parametrize(("service", "operation"), [o for o in OPERATIONS if o[1] != "charge"])
def test_pending_can_be_scripted_only_for_charges(service: str, operation: str) -> None:
    with pytest.raises(ValueError, match="pending"):
        make_sim().script(service, operation, ["pending"])


def test_a_pending_charge_stays_pending_until_settled() -> None:
    sim = make_sim()
    sim.script("payments", "charge", ["pending"])
    response = call(sim, "payments", "charge", key=CHARGE_KEY)
    assert (response.status, response.body, response.effect_applied) == (
        202, {"status": "pending"}, True
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


def test_a_charge_settled_as_failed_reports_failed_and_cannot_be_refunded() -> None:
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


@pytest.mark.parametrize(("service", "operation"), MUTATING)
def test_the_same_key_and_body_replays_the_stored_answer_without_a_second_effect(
    service: str, operation: str
) -> None:
    sim, body = prepared(operation)
    first = call(sim, service, operation, body=body)
    count = effect_count(sim)
    again = call(sim, service, operation, body=body)
    assert (again.status, again.body, again.effect_applied) == (first.status, first.body, False)
    assert effect_count(sim) == count
    assert [c["replayed"] for c in sim.ledger()["calls"]][-2:] == [False, True]


@pytest.mark.parametrize(("service", "operation"), MUTATING)
def test_the_same_key_with_another_body_is_refused_as_reused(service: str, operation: str) -> None:
    sim, body = prepared(operation)
    call(sim, service, operation, body=body)
    count = effect_count(sim)
    response = call(sim, service, operation, body={**body, "order_id": "another"})
    assert (response.status, response.body["code"]) == (422, "idempotency_key_reused")
    assert effect_count(sim) == count
    assert isinstance(classify(operation, response.status, response.body), Broken)


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
            "charges": [], "reservations": [], "shipments": [], "refunds": [], "tombstones": []
        },
        "scripts": [],
    }
    assert call(sim, "payments", "charge", key=CHARGE_KEY).status == 201


def test_an_unknown_operation_of_a_service_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown operation"):
        make_sim().handle(
            "shipping", "charge", order_id=None, step_id=None, idempotency_key="k", body={}
        )


CLASSIFICATION = [
    ("reserve", 201, {"reservation_id": "r", "status": "held"}, Succeeded),
    ("reserve", 409, {"code": "out_of_stock"}, Refused),
    ("reserve", 409, {"code": "something_else"}, Broken),
    ("reserve", 201, {"status": "held"}, Broken),
    ("release", 200, {"status": "released"}, Succeeded),
    ("release", 200, {"status": "nothing_to_release"}, Succeeded),
    ("release", 200, {"status": "gone"}, Broken),
    ("charge", 201, {"payment_reference": "p", "status": "succeeded"}, Succeeded),
    ("charge", 202, {"status": "pending"}, UnknownOutcome),
    ("charge", 402, {"code": "card_declined"}, Refused),
    ("charge", 409, {"code": "card_declined"}, Broken),
    ("charge", 201, None, Broken),
    ("status", 200, {"status": "succeeded", "payment_reference": "p"}, Succeeded),
    ("status", 200, {"status": "failed"}, Succeeded),
    ("status", 200, {"status": "pending"}, Succeeded),
    ("status", 200, {"status": "succeeded"}, Broken),
    ("status", 404, {"code": "not_found"}, Refused),
    ("status", 404, None, Broken),
    ("refund", 201, {"refund_reference": "f", "status": "succeeded"}, Succeeded),
    ("refund", 409, {"code": "refund_rejected"}, Refused),
    ("ship", 201, {"shipment_id": "s"}, Succeeded),
    ("ship", 422, {"code": "undeliverable"}, Refused),
    ("ship", 422, {"code": "validation_failed"}, Broken),
    ("ship", 400, {"code": "bad_request"}, Broken),
    ("ship", 429, {"code": "slow_down"}, Broken),
    ("ship", 302, {}, Broken),
    ("ship", 500, None, Transient),
    ("charge", 503, {"code": "service_unavailable"}, Transient),
    ("status", 504, "not an object", Transient),
]


@pytest.mark.parametrize(("operation", "status", "body", "expected"), CLASSIFICATION)
def test_the_classification_table_maps_each_answer_to_one_outcome_class(
    operation: str, status: int, body: object, expected: type
) -> None:
    assert type(classify(operation, status, body)) is expected


def test_a_transient_answer_carries_its_retry_after_hint() -> None:
    assert classify("charge", 503, None, 2.5) == Transient("charge: HTTP 503", retry_after_s=2.5)


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
