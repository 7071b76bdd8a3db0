"""The one classification table the HTTP clients and the in-process adapters share."""

from __future__ import annotations

import pytest

from orderflow_core.classify import classify
from orderflow_core.outcomes import Broken, Refused, Succeeded, Transient, UnknownOutcome

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


def test_an_unknown_operation_cannot_be_classified() -> None:
    with pytest.raises(ValueError, match="unknown operation"):
        classify("teleport", 200, {})


# What must not pass for a success: money is "paid" only on a well-formed success answer.
MALFORMED_SUCCESSES = [
    ("charge", 201, {"status": "succeeded"}),  # no payment_reference
    ("charge", 201, {"status": "succeeded", "payment_reference": ""}),  # an empty one
    ("charge", 201, {"status": "succeeded", "payment_reference": 12345}),  # not text
    ("charge", 201, {"status": "failed", "payment_reference": "p"}),  # another status
    ("charge", 201, {"payment_reference": "p"}),  # no status at all
    ("status", 200, {"status": "refunded", "payment_reference": "p"}),  # not a payment status
    ("status", 200, {"status": "succeeded", "payment_reference": ""}),
    ("reserve", 201, {"reservation_id": "", "status": "held"}),
    ("reserve", 201, {"reservation_id": 7, "status": "held"}),
    ("reserve", 201, {"reservation_id": "r", "status": "released"}),
    ("refund", 201, {"refund_reference": "", "status": "succeeded"}),
    ("ship", 201, {"shipment_id": ""}),
    ("ship", 201, {"shipment_id": True}),
]


@pytest.mark.parametrize(("operation", "status", "body"), MALFORMED_SUCCESSES)
def test_a_2xx_answer_without_the_documented_shape_is_broken_not_a_success(
    operation: str, status: int, body: dict[str, object]
) -> None:
    outcome = classify(operation, status, body)
    assert outcome == Broken(f"{operation}: HTTP {status} with a malformed body")


@pytest.mark.parametrize("status", [199, 300, 301, 302])
def test_only_a_2xx_status_can_be_a_success(status: int) -> None:
    outcome = classify("charge", status, {"status": "succeeded", "payment_reference": "p"})
    assert outcome == Broken(f"charge: unexpected HTTP {status} code=None")


@pytest.mark.parametrize("status", [200, 201, 299])
def test_every_2xx_status_with_the_documented_shape_is_a_success(status: int) -> None:
    body = {"status": "succeeded", "payment_reference": "p"}
    assert classify("charge", status, body) == Succeeded(body)


def test_a_refusal_carries_its_code_and_the_services_detail_or_none() -> None:
    assert classify("charge", 402, {"code": "card_declined", "detail": "expired card"}) == (
        Refused("card_declined", "expired card")
    )
    assert classify("charge", 402, {"code": "card_declined"}) == Refused("card_declined", "")


def test_a_broken_answer_says_which_operation_and_status() -> None:
    assert classify("ship", 201, ["not", "an", "object"]) == Broken(
        "ship: HTTP 201 with a body that is not a JSON object"
    )
    assert classify("ship", 418, {"code": "teapot"}) == Broken(
        "ship: unexpected HTTP 418 code='teapot'"
    )
    assert classify("ship", 499, None) == Broken(
        "ship: HTTP 499 with a body that is not a JSON object"
    )
