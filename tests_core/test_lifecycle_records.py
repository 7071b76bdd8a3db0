"""What an order's record says, path by path: every state change with its reason and actor,
the events consumers see, and the audit log. Operators read these to know why an order is
where it is, so they are behaviour, not decoration."""

from __future__ import annotations

import pytest

from tests_core.world import CUSTOMER, OPERATOR, World

W = "worker-0"
START = [
    (None, "created", "order placed", "customer:order_customer"),
    ("created", "reserving", "reserve step started", W),
]
RESERVED = [*START, ("reserving", "reserved", "warehouse confirmed", W)]
PAYING = [*RESERVED, ("reserved", "paying", "charge step started", W)]
PAID = [*PAYING, ("paying", "paid", "payment confirmed", W)]
SHIPPING = [*PAID, ("paid", "shipping", "ship step started", W)]
CREATED_AUDIT = ("order.created", "created", {"idempotency_key": "key-1"})
PAID_AUDIT = ("step.cancelled", "expire_reservation", {"reason": "payment confirmed"})

WAITS = "order.needs_attention"
OPERATOR_ACTOR = "operator:order_operator"
RESEND = "reconciliation found no charge: re-send with the same key"

PATHS = {
    "shipped": (
        [],
        [*SHIPPING, ("shipping", "shipped", "carrier confirmed", W)],
        [CREATED_AUDIT, PAID_AUDIT],
    ),
    "out of stock": (
        [("warehouse", "reserve", ["permanent"])],
        [*START, ("reserving", "reservation_failed", "out_of_stock", W)],
        [CREATED_AUDIT, ("step.failed", "out_of_stock", {"kind": "reserve"})],
    ),
    "card declined": (
        [("payments", "charge", ["permanent"])],
        [
            *PAYING,
            ("paying", "releasing", "card_declined", W),
            ("releasing", "payment_failed", "card_declined", W),
        ],
        [
            CREATED_AUDIT,
            ("step.failed", "card_declined", {"kind": "charge"}),
            ("step.cancelled", "expire_reservation", {"reason": "card_declined"}),
            ("compensation.release_reservation", "requested", {"reason": "card_declined"}),
            ("compensation.release_reservation", "released", {}),
        ],
    ),
    "undeliverable": (
        [("shipping", "ship", ["permanent"])],
        [*SHIPPING, ("shipping", "shipping_failed", "undeliverable", W)],
        [CREATED_AUDIT, PAID_AUDIT, ("step.failed", "undeliverable", {"kind": "ship"})],
    ),
    "carrier down": (
        [("shipping", "ship", ["transient"] * 5)],
        [*SHIPPING, ("shipping", "shipping_failed", "shipping retries exhausted", W)],
        [CREATED_AUDIT, PAID_AUDIT, ("step.failed", "ship: HTTP 503", {"kind": "ship"})],
    ),
    "charge answer lost": (
        [("payments", "charge", ["lost_response"])],
        [
            *PAYING,
            ("paying", "payment_unknown", "charge: connection dropped after sending", W),
            ("payment_unknown", "paid", "reconciliation confirmed the charge", W),
            ("paid", "shipping", "ship step started", W),
            ("shipping", "shipped", "carrier confirmed", W),
        ],
        [
            CREATED_AUDIT,
            (
                "step.failed",
                "outcome_unknown: charge: connection dropped after sending",
                {"kind": "charge"},
            ),
            PAID_AUDIT,
        ],
    ),
    "charge never arrived": (
        [("payments", "charge", ["timeout"])],
        [
            *PAYING,
            ("paying", "payment_unknown", "charge: timed out", W),
            ("payment_unknown", "paying", RESEND, W),
            ("paying", "paid", "payment confirmed", W),
            ("paid", "shipping", "ship step started", W),
            ("shipping", "shipped", "carrier confirmed", W),
        ],
        [
            CREATED_AUDIT,
            ("step.failed", "outcome_unknown: charge: timed out", {"kind": "charge"}),
            PAID_AUDIT,
        ],
    ),
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_each_path_leaves_its_reasons_events_and_audit(path: str) -> None:
    script, history, audit = PATHS[path]
    w = World()
    try:
        for service, operation, outcomes in script:
            w.sim.script(service, operation, outcomes)
        order_id = w.create()
        w.settle()
        found = [
            (h.from_state.value if h.from_state else None, h.to_state.value, h.reason, h.actor)
            for h in w.run(w.store.history(order_id))
        ]
        assert found == history
        w.publish()
        events = w.run(w.store.events(after=0, limit=100))
        transitions = [e for e in events if e.type.startswith("order.") and e.type != WAITS]
        assert [e.type for e in transitions] == [f"order.{h[1]}" for h in history]
        # An order that ends waiting for a person says so, once, with why.
        waiting = [e.payload["reason"] for e in events if e.type == WAITS]
        assert waiting == (["shipping_failed"] if history[-1][1] == "shipping_failed" else [])
        assert [(e.payload["from"], e.payload["to"], e.payload["reason"]) for e in transitions] == [
            h[:3] for h in history
        ]
        entries = w.run(w.store.audit_entries(order_id))
        assert [(a.action, a.outcome, a.details) for a in entries] == audit
        # A step that succeeded keeps the service's answer.
        effects = w.effects()
        for step in w.load(order_id).steps:
            if step.kind.value == "ship" and step.status.value == "succeeded":
                (shipment,) = effects["shipments"]
                assert step.result["shipment_id"] == shipment["shipment_id"]
    finally:
        w.close()


def test_a_full_refund_after_a_failed_shipment_is_recorded_from_request_to_refunded() -> None:
    w = World()
    try:
        w.sim.script("shipping", "ship", ["permanent"])
        order_id = w.create()
        w.settle()
        total = w.load(order_id).order.total_minor
        refund, _ = w.run(w.service.request_refund(OPERATOR, order_id, "r-1", None, "lost"))
        w.settle()
        last = w.run(w.store.history(order_id))[-1]
        assert (last.from_state.value, last.to_state.value, last.reason) == (  # type: ignore[union-attr]
            "shipping_failed",
            "refunded",
            "full refund succeeded",
        )
        w.publish()
        events = [
            (e.type, e.payload)
            for e in w.run(w.store.events(after=0, limit=100))
            if e.type.startswith("refund.")
        ]
        rid = str(refund.refund_id)
        ids = {"order_id": str(order_id), "refund_id": rid}
        assert events == [
            (
                "refund.requested",
                {**ids, "actor": OPERATOR_ACTOR, "amount_minor": total, "reason": "lost"},
            ),
            (
                "refund.succeeded",
                {**ids, "actor": W, "amount_minor": total},
            ),
        ]
        entries = [
            (a.action, a.outcome, a.actor, a.details)
            for a in w.run(w.store.audit_entries(order_id))
            if a.action.startswith(("manual.", "compensation."))
        ]
        assert entries == [
            (
                "manual.refund",
                "requested",
                "operator:order_operator",
                {"refund_id": rid, "amount_minor": total, "reason": "lost"},
            ),
            ("compensation.refund", "succeeded", W, {"refund_id": rid, "amount_minor": total}),
            # The refund ended the order: the stock it held goes back to the warehouse.
            ("compensation.release_reservation", "requested", W, {"reason": "refunded"}),
            ("compensation.release_reservation", "released", W, {}),
        ]
    finally:
        w.close()


def test_a_new_order_reads_back_as_placed_and_its_key_replays_it() -> None:
    w = World()
    try:
        now = w.clock.now()
        order_id = w.create()
        order = w.load(order_id).order
        assert (order.created_at, order.updated_at, order.state_reason) == (
            now,
            now,
            "order placed",
        )
        (first,) = w.run(w.store.history(order_id))
        assert (first.order_id, first.seq, first.at) == (order_id, 1, now)
        w.publish()
        (created,) = w.run(w.store.events(after=0, limit=10))
        assert created.payload == {
            "order_id": str(order_id),
            "from": None,
            "to": "created",
            "reason": "order placed",
            "actor": "customer:order_customer",
            "total_minor": order.total_minor,
        }
        lines = list(order.items)
        view, replayed = w.run(w.service.create_order(CUSTOMER, "key-1", lines, "RUB"))
        assert replayed
        assert view.aggregate.order.order_id == order_id
    finally:
        w.close()
