"""A refund that ends an undeliverable order gives its stock back, end to end: the operator
refunds through the API, the release runs against the simulated warehouse over HTTP, and
GET /orders/{id} and the audit show it."""

from __future__ import annotations

import pytest

from acceptance.stack import Stack
from orderflow_core import OrderState, StepKind

pytestmark = pytest.mark.postgres
S = OrderState


def test_refunding_an_undeliverable_order_through_the_api_releases_its_reservation(
    stack: Stack,
) -> None:
    order_id = stack.create()
    stack.sim.script("shipping", "ship", ["permanent"], order_id=str(order_id))
    stack.settle()
    path = f"/api/v1/orders/{order_id}"
    before = stack.call("GET", path, who="operator")
    assert before.body["state"] == "shipping_failed"
    assert before.body["reservation"]["status"] == "held"

    refund = stack.call(
        "POST", f"{path}/refunds", who="operator", key="refund-1", body={"reason": "lost"}
    )
    assert refund.status == 202, refund.body
    stack.settle()

    after = stack.call("GET", path, who="customer")
    assert after.status == 200
    assert after.body["state"] == "refunded"
    assert after.body["reservation"]["status"] == "released"
    [release] = [s for s in after.body["steps"] if s["kind"] == "release_reservation"]
    assert release["status"] == "succeeded"
    reserve = stack.load(order_id).latest(StepKind.RESERVE)
    assert reserve is not None
    [reservation] = stack.ledger(order_id)["effects"]["reservations"]
    assert reservation["idempotency_key"] == reserve.idempotency_key
    assert reservation["status"] == "released"

    audit = stack.call("GET", f"{path}/audit", who="operator")
    compensations = [
        (entry["action"], entry["outcome"])
        for entry in audit.body["entries"]
        if entry["step_id"] == release["step_id"]
    ]
    assert compensations == [
        ("compensation.release_reservation", "requested"),
        ("compensation.release_reservation", "released"),
    ]
