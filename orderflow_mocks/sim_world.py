"""The state of the simulated world: stock held, money moved, parcels sent, refunds paid.

Each method applies one operation of the simulated services that the idempotency layer let
through and says, in its `SimResponse`, whether the world changed. Every change is also noted
as a plain-data entry, so a journal can keep the world across a restart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from orderflow_mocks.sim_wire import SimResponse, problem


@attrs.frozen
class SimReservation:
    order_id: str
    idempotency_key: str
    reservation_id: str
    status: str  # held | released


@attrs.frozen
class SimCharge:
    order_id: str
    idempotency_key: str
    amount_minor: int
    payment_reference: str | None
    status: str  # succeeded | failed | pending


@attrs.frozen
class SimShipment:
    order_id: str
    idempotency_key: str
    shipment_id: str


@attrs.frozen
class SimMessage:
    order_id: str
    idempotency_key: str
    message_id: str
    template: str


@attrs.frozen
class SimRefund:
    order_id: str
    idempotency_key: str
    payment_reference: str
    refund_reference: str
    amount_minor: int


@attrs.frozen
class SimTombstone:
    """A reservation key released before it was reserved: it stays refused."""

    order_id: str
    reservation_key: str


# What `permanent` answers for each operation: the documented refusal, or — for calls that have
# no business refusal (release, status) — an undocumented 422 the caller must treat as broken.
PERMANENT_ANSWERS: Mapping[str, tuple[int, str]] = {
    "reserve": (409, "out_of_stock"),
    "release": (422, "request_rejected"),
    "charge": (402, "card_declined"),
    "status": (422, "request_rejected"),
    "refund": (409, "refund_rejected"),
    "ship": (422, "undeliverable"),
    "notify": (422, "undeliverable_address"),
}


def _created(status: int, body: dict[str, Any]) -> SimResponse:
    return SimResponse(status=status, body=body, effect_applied=True)


# The record class of each table, for rebuilding the world from journal entries.
TABLES: Mapping[str, type[Any]] = {
    "reservations": SimReservation,
    "tombstones": SimTombstone,
    "charges": SimCharge,
    "shipments": SimShipment,
    "refunds": SimRefund,
    "messages": SimMessage,
}


class SimWorld:
    """Everything the three services hold; ids come from the injected `new_id`."""

    def __init__(self, new_id: Callable[[], str]) -> None:
        self._new_id = new_id
        self.reservations: dict[str, SimReservation] = {}
        self.tombstones: dict[str, SimTombstone] = {}
        self.charges: dict[str, SimCharge] = {}
        self.shipments: dict[str, SimShipment] = {}
        self.refunds: dict[str, SimRefund] = {}
        self.messages: dict[str, SimMessage] = {}
        self._changed: list[tuple[str, str]] = []

    def _put(self, table: str, key: str, record: Any) -> None:
        getattr(self, table)[key] = record
        self._changed.append((table, key))

    def take_changes(self) -> list[dict[str, Any]]:
        """The records changed since the last call, as journal entries (each once, newest)."""
        changed, self._changed = dict.fromkeys(self._changed), []
        return [self._entry(table, key) for table, key in changed]

    def entries(self) -> list[dict[str, Any]]:
        """Every record as a journal entry: the whole world, to write a fresh journal."""
        return [self._entry(table, key) for table in TABLES for key in getattr(self, table)]

    def _entry(self, table: str, key: str) -> dict[str, Any]:
        return {"table": table, "key": key, "value": attrs.asdict(getattr(self, table)[key])}

    def restore(self, entry: Mapping[str, Any]) -> None:
        """Put back one record from a journal entry written by `take_changes` or `entries`."""
        table = entry["table"]
        getattr(self, table)[entry["key"]] = TABLES[table](**entry["value"])

    def reserve(self, key: str, body: Mapping[str, Any]) -> SimResponse:
        if key in self.tombstones:
            return problem(
                409, "reservation_key_released", "this key was released before it was reserved"
            )
        reservation = SimReservation(body["order_id"], key, f"res-{self._new_id()}", "held")
        self._put("reservations", key, reservation)
        return _created(201, {"reservation_id": reservation.reservation_id, "status": "held"})

    def release(self, key: str, body: Mapping[str, Any]) -> SimResponse:
        del key  # the release's own key only guards replays; the target is reservation_key
        target: str = body["reservation_key"]
        reservation = self.reservations.get(target)
        if reservation is not None and reservation.status == "held":
            self._put("reservations", target, attrs.evolve(reservation, status="released"))
            return _created(200, {"status": "released"})
        if reservation is None and target not in self.tombstones:
            self._put("tombstones", target, SimTombstone(body["order_id"], target))
            return _created(200, {"status": "nothing_to_release"})
        return SimResponse(status=200, body={"status": "nothing_to_release"})

    def charge(self, key: str, body: Mapping[str, Any], *, pending: bool) -> SimResponse:
        reference = None if pending else f"pay-{self._new_id()}"
        status = "pending" if pending else "succeeded"
        charge = SimCharge(body["order_id"], key, body["amount_minor"], reference, status)
        self._put("charges", key, charge)
        if pending:
            return _created(202, {"status": "pending"})
        return _created(201, {"payment_reference": reference, "status": "succeeded"})

    def status(self, charge_key: str) -> SimResponse:
        charge = self.charges.get(charge_key)
        if charge is None:
            return problem(404, "not_found", "no charge was received under this key")
        body: dict[str, Any] = {"status": charge.status}
        if charge.payment_reference is not None:
            body["payment_reference"] = charge.payment_reference
        return SimResponse(status=200, body=body)

    def refund(self, key: str, body: Mapping[str, Any]) -> SimResponse:
        reference: str = body["payment_reference"]
        amount: int = body["amount_minor"]
        charge = next((c for c in self.charges.values() if c.payment_reference == reference), None)
        if charge is None or charge.status != "succeeded":
            return problem(409, "refund_rejected", "no succeeded charge has this reference")
        refunded = sum(
            r.amount_minor for r in self.refunds.values() if r.payment_reference == reference
        )
        if amount > charge.amount_minor - refunded:
            return problem(409, "refund_rejected", "the amount exceeds what is left to refund")
        refund = SimRefund(body["order_id"], key, reference, f"rfd-{self._new_id()}", amount)
        self._put("refunds", key, refund)
        return _created(201, {"refund_reference": refund.refund_reference, "status": "succeeded"})

    def ship(self, key: str, body: Mapping[str, Any]) -> SimResponse:
        shipment = SimShipment(body["order_id"], key, f"shp-{self._new_id()}")
        self._put("shipments", key, shipment)
        return _created(201, {"shipment_id": shipment.shipment_id})

    def notify(self, key: str, body: Mapping[str, Any]) -> SimResponse:
        message = SimMessage(body["order_id"], key, f"msg-{self._new_id()}", body["template"])
        self._put("messages", key, message)
        return _created(201, {"message_id": message.message_id, "status": "sent"})

    def settle(self, charge_key: str, status: str) -> SimCharge:
        """Resolve a pending charge; KeyError if unknown, ValueError if not pending."""
        if status not in ("succeeded", "failed"):
            raise ValueError("status must be 'succeeded' or 'failed'")
        charge = self.charges[charge_key]
        if charge.status != "pending":
            raise ValueError(f"the charge is already {charge.status}")
        reference = f"pay-{self._new_id()}" if status == "succeeded" else None
        settled = attrs.evolve(charge, status=status, payment_reference=reference)
        self._put("charges", charge_key, settled)
        return settled

    def effects(self, order_id: str | None) -> dict[str, list[dict[str, Any]]]:
        """The effects part of the ledger, optionally for one order."""

        def rows(records: Mapping[str, Any]) -> list[dict[str, Any]]:
            return [
                attrs.asdict(r)
                for r in records.values()
                if order_id is None or r.order_id == order_id
            ]

        return {
            "charges": rows(self.charges),
            "reservations": rows(self.reservations),
            "shipments": rows(self.shipments),
            "refunds": rows(self.refunds),
            "tombstones": rows(self.tombstones),
            "messages": rows(self.messages),
        }
