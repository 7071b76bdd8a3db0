"""The HTTP-shaped values of the simulated services: responses, problems, request checks.

Shaped like HTTP so that the aiohttp server in `orderflow_mocks` wraps the simulator 1:1 and an
in-process test sees exactly what a client over a socket would.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Literal

import attrs

Disposition = Literal["answer", "timeout", "lost_response"]

# The operations of the simulated services, by the names scripts and the ledger use.
OPERATIONS: Mapping[str, tuple[str, ...]] = {
    "warehouse": ("reserve", "release"),
    "payments": ("charge", "status", "refund"),
    "shipping": ("ship",),
    "notifications": ("notify",),
}

# The scripted outcome kinds (docs/simulated-services.md).
OUTCOME_KINDS = frozenset(
    {"success", "transient", "permanent", "timeout", "lost_response", "pending"}
)


@attrs.frozen
class SimResponse:
    """What the simulated service does with one call.

    `disposition` says whether the caller gets `status`/`body` at all: `timeout` means the
    request is held and then dropped, `lost_response` means the effect happened but the
    connection closes with no answer. `effect_applied` is True only for the one call that
    changed the simulated world (never for a replay).
    """

    status: int
    body: dict[str, Any]
    disposition: Disposition = "answer"
    retry_after_s: float | None = None
    effect_applied: bool = False


class InvalidRequestError(Exception):
    """A request the simulated service rejects before doing anything (400/422)."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail

    def response(self) -> SimResponse:
        return problem(self.status, self.code, self.detail)


def problem(status: int, code: str, detail: str, **extra: Any) -> SimResponse:
    """An RFC 9457 problem answer carrying the stable `code`."""
    body: dict[str, Any] = {
        "type": f"urn:orderflow:mocks:{code}",
        "title": code.replace("_", " "),
        "status": status,
        "detail": detail,
        "code": code,
        **extra,
    }
    return SimResponse(status=status, body=body)


def fingerprint(body: Mapping[str, Any]) -> str:
    """Canonical JSON of a request body: equal bodies, equal fingerprints."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def check_idempotency_key(key: str | None) -> str:
    """1-255 visible ASCII characters, as for the REST API."""
    if key is None or key == "":
        raise InvalidRequestError(400, "idempotency_key_required", "Idempotency-Key is required")
    if len(key) > 255 or not all(33 <= ord(ch) <= 126 for ch in key):
        raise InvalidRequestError(
            400, "invalid_idempotency_key", "Idempotency-Key must be 1-255 visible ASCII chars"
        )
    return key


def _invalid(field: str, message: str) -> InvalidRequestError:
    return InvalidRequestError(422, "validation_failed", f"{field}: {message}")


def _text(body: Mapping[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value or len(value) > 255:
        raise _invalid(field, "must be a non-empty string of at most 255 characters")
    return value


def _integer(body: Mapping[str, Any], field: str, minimum: int) -> int:
    value = body.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _invalid(field, f"must be an integer >= {minimum}")
    return value


def _items(body: Mapping[str, Any]) -> None:
    items = body.get("items")
    if not isinstance(items, list) or not items:
        raise _invalid("items", "must be a non-empty list")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise _invalid(f"items[{index}]", "must be an object")
        _text(item, "sku")
        _integer(item, "quantity", 1)


def _check_reserve(body: Mapping[str, Any]) -> None:
    _text(body, "order_id")
    _items(body)


def _check_release(body: Mapping[str, Any]) -> None:
    _text(body, "order_id")
    _text(body, "reservation_key")


def _check_charge(body: Mapping[str, Any]) -> None:
    _text(body, "order_id")
    _integer(body, "amount_minor", 1)
    _text(body, "currency")


def _check_refund(body: Mapping[str, Any]) -> None:
    _text(body, "order_id")
    _text(body, "payment_reference")
    _integer(body, "amount_minor", 1)


def _check_nothing(body: Mapping[str, Any]) -> None:
    del body  # the status call carries its key in the path


def _check_notify(body: Mapping[str, Any]) -> None:
    _text(body, "order_id")
    _text(body, "template")


REQUEST_CHECKS: Mapping[str, Callable[[Mapping[str, Any]], None]] = {
    "reserve": _check_reserve,
    "release": _check_release,
    "charge": _check_charge,
    "status": _check_nothing,
    "refund": _check_refund,
    "ship": _check_reserve,
    "notify": _check_notify,
}
