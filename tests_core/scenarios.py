"""Named end-to-end scenarios on the in-memory world; together they reach every edge."""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

from orderflow_core import OrderState
from tests_core.world import CUSTOMER, OPERATOR, World

S = OrderState
Scenario = Callable[[World], UUID]


def happy_path(w: World) -> UUID:
    order_id = w.create()
    w.settle()
    assert w.state(order_id) is S.SHIPPED
    return order_id


def cancel_before_reserve(w: World) -> UUID:
    order_id = w.create()
    w.run(w.service.cancel(CUSTOMER, order_id))
    assert w.state(order_id) is S.CANCELLED
    return order_id


def warehouse_refuses(w: World) -> UUID:
    w.sim.script("warehouse", "reserve", ["permanent"])
    order_id = w.create()
    w.settle()
    assert w.state(order_id) is S.RESERVATION_FAILED
    return order_id


def cancel_after_reserve_retries_exhausted(w: World) -> UUID:
    w.sim.script("warehouse", "reserve", ["transient"] * 5)
    order_id = w.create()
    w.settle()
    assert w.state(order_id) is S.RESERVING
    w.run(w.service.cancel(CUSTOMER, order_id))
    w.settle()
    assert w.state(order_id) is S.CANCELLED
    return order_id


def cancel_when_reserved(w: World) -> UUID:
    order_id = w.create()
    w.step()  # the reserve step only
    assert w.state(order_id) is S.RESERVED
    w.run(w.service.cancel(CUSTOMER, order_id))
    w.settle()
    assert w.state(order_id) is S.CANCELLED
    return order_id


def reservation_expires_before_any_charge(w: World) -> UUID:
    order_id = w.create()
    w.step()
    w.clock.advance(w.timing.reservation_ttl_s + 1)
    w.settle()
    assert w.state(order_id) is S.PAYMENT_FAILED
    assert w.charges(order_id) == []
    return order_id


def card_declined(w: World) -> UUID:
    w.sim.script("payments", "charge", ["permanent"])
    order_id = w.create()
    w.settle()
    assert w.state(order_id) is S.PAYMENT_FAILED
    return order_id


def lost_response_then_reconciled_paid(w: World) -> UUID:
    w.sim.script("payments", "charge", ["lost_response"])
    order_id = w.create()
    w.settle()
    assert w.state(order_id) is S.SHIPPED
    assert len(w.charges(order_id)) == 1
    return order_id


def pending_charge_settles_failed(w: World) -> UUID:
    w.sim.script("payments", "charge", ["pending"])
    order_id = w.create()
    w.step()  # reserve
    w.step()  # charge -> pending -> payment_unknown
    assert w.state(order_id) is S.PAYMENT_UNKNOWN
    key = w.charges(order_id)[0]["idempotency_key"]
    w.sim.settle(key, "failed")
    w.settle()
    assert w.state(order_id) is S.PAYMENT_FAILED
    return order_id


def timeout_then_no_charge_then_resent(w: World) -> UUID:
    w.sim.script("payments", "charge", ["timeout"])
    order_id = w.create()
    w.settle()
    assert w.state(order_id) is S.SHIPPED
    charges = w.charges(order_id)
    assert len(charges) == 1
    return order_id


def charge_retries_exhausted_then_hold_expires(w: World) -> UUID:
    w.sim.script("payments", "charge", ["transient"] * 5)
    order_id = w.create()
    w.settle()
    assert w.state(order_id) is S.PAYING
    w.clock.advance(w.timing.reservation_ttl_s)
    w.settle()
    assert w.state(order_id) is S.PAYMENT_FAILED
    return order_id


def carrier_refuses_then_operator_retries(w: World) -> UUID:
    w.sim.script("shipping", "ship", ["permanent"])
    order_id = w.create()
    w.settle()
    assert w.state(order_id) is S.SHIPPING_FAILED
    w.run(w.service.retry(OPERATOR, order_id))
    w.settle()
    assert w.state(order_id) is S.SHIPPED
    return order_id


def carrier_refuses_then_full_refund(w: World) -> UUID:
    w.sim.script("shipping", "ship", ["permanent"])
    order_id = w.create()
    w.settle()
    w.run(w.service.request_refund(OPERATOR, order_id, "refund-1", None, "parcel lost"))
    w.settle()
    assert w.state(order_id) is S.REFUNDED
    # The refund settled the money, so the stock goes back too (under the reserve call's key).
    assert w.load(order_id).order.reservation_status == "released"
    [reservation] = w.sim.ledger(order_id=str(order_id))["effects"]["reservations"]
    assert reservation["status"] == "released"
    return order_id


SCENARIOS: dict[str, Scenario] = {
    f.__name__: f
    for f in (
        happy_path,
        cancel_before_reserve,
        warehouse_refuses,
        cancel_after_reserve_retries_exhausted,
        cancel_when_reserved,
        reservation_expires_before_any_charge,
        card_declined,
        lost_response_then_reconciled_paid,
        pending_charge_settles_failed,
        timeout_then_no_charge_then_resent,
        charge_retries_exhausted_then_hold_expires,
        carrier_refuses_then_operator_retries,
        carrier_refuses_then_full_refund,
    )
}
