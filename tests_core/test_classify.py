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
