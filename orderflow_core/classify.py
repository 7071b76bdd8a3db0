"""How a caller reads an answer of the external services into an `Outcome`.

One table, shared by the HTTP clients and the in-process simulated adapters, so a test that
passes in memory means the same thing over a socket.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from orderflow_core.outcomes import (
    Broken,
    Outcome,
    Refused,
    Succeeded,
    Transient,
    UnknownOutcome,
)

# The operations of the three services, by the names scripts and the ledger use.
OPERATIONS: Mapping[str, tuple[str, ...]] = {
    "warehouse": ("reserve", "release"),
    "payments": ("charge", "status", "refund"),
    "shipping": ("ship",),
}

# The documented permanent refusals: (status, code) pairs each operation may answer.
# `reservation_key_released`: a release arrived before the reservation (a tombstone).
REFUSALS: Mapping[str, frozenset[tuple[int, str]]] = {
    "reserve": frozenset({(409, "out_of_stock"), (409, "reservation_key_released")}),
    "release": frozenset(),
    "charge": frozenset({(402, "card_declined")}),
    "status": frozenset({(404, "not_found")}),
    "refund": frozenset({(409, "refund_rejected")}),
    "ship": frozenset({(422, "undeliverable")}),
}

PAYMENT_STATUSES = frozenset({"succeeded", "failed", "pending"})


def _is_text(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def _reserve_ok(body: Mapping[str, Any]) -> bool:
    return _is_text(body.get("reservation_id")) and body.get("status") == "held"


def _release_ok(body: Mapping[str, Any]) -> bool:
    return body.get("status") in ("released", "nothing_to_release")


def _charge_ok(body: Mapping[str, Any]) -> bool:
    return body.get("status") == "succeeded" and _is_text(body.get("payment_reference"))


def _status_ok(body: Mapping[str, Any]) -> bool:
    status = body.get("status")
    if status not in PAYMENT_STATUSES:
        return False
    return status != "succeeded" or _is_text(body.get("payment_reference"))


def _refund_ok(body: Mapping[str, Any]) -> bool:
    return _is_text(body.get("refund_reference"))


def _ship_ok(body: Mapping[str, Any]) -> bool:
    return _is_text(body.get("shipment_id"))


# What a well-formed success body of each operation must contain.
_SUCCESS_SHAPES: Mapping[str, Callable[[Mapping[str, Any]], bool]] = {
    "reserve": _reserve_ok,
    "release": _release_ok,
    "charge": _charge_ok,
    "status": _status_ok,
    "refund": _refund_ok,
    "ship": _ship_ok,
}


def classify(
    operation: str, status: int, body: object, retry_after_s: float | None = None
) -> Outcome:
    """The outcome of an answered call: `status` and the decoded JSON `body` (None if not JSON).

    2xx with the documented shape → Succeeded (a `pending` charge → UnknownOutcome); the documented
    refusal → Refused(code); 5xx → Transient; any other answer, or a malformed body → Broken.
    Calls that got no answer (timeout, dropped connection) never reach this function.
    """
    if operation not in _SUCCESS_SHAPES:
        raise ValueError(f"unknown operation {operation!r}")
    if status >= 500:
        return Transient(detail=f"{operation}: HTTP {status}", retry_after_s=retry_after_s)
    if not isinstance(body, dict):
        return Broken(detail=f"{operation}: HTTP {status} with a body that is not a JSON object")
    if 200 <= status < 300:
        return _classify_success(operation, status, body)
    code = body.get("code")
    if isinstance(code, str) and (status, code) in REFUSALS[operation]:
        return Refused(code=code, detail=str(body.get("detail", "")))
    return Broken(detail=f"{operation}: unexpected HTTP {status} code={code!r}")


def _classify_success(operation: str, status: int, body: dict[str, Any]) -> Outcome:
    if operation == "charge" and body.get("status") == "pending":
        return UnknownOutcome(detail="charge: pending")
    if not _SUCCESS_SHAPES[operation](body):
        return Broken(detail=f"{operation}: HTTP {status} with a malformed body")
    return Succeeded(result=body)
