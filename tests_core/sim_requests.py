"""Canned requests to the simulated services, shared by the simulation tests."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from orderflow_mocks.simulation import SimResponse, Simulator

OPERATIONS = [
    ("warehouse", "reserve"),
    ("warehouse", "release"),
    ("payments", "charge"),
    ("payments", "status"),
    ("payments", "refund"),
    ("shipping", "ship"),
    ("notifications", "notify"),
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
    bodies: dict[str, dict[str, Any]] = {
        "reserve": {"order_id": "o1", "items": ITEMS},
        "release": {"order_id": "o1", "reservation_key": "reserve-key"},
        "charge": {"order_id": "o1", "amount_minor": 1000, "currency": "RUB"},
        "status": {},
        "refund": {"order_id": "o1", "payment_reference": reference, "amount_minor": 400},
        "ship": {"order_id": "o1", "items": ITEMS},
        "notify": {"order_id": "o1", "template": "shipped"},
    }
    return bodies[operation]


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
