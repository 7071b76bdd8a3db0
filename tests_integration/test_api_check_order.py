"""When a request is wrong in several ways, the first check in this order answers:
401 (token) → 403 (role) → 400 (headers, query) → 415 (media type) → 413 (size)
→ 400 (JSON syntax) → 422 (body rules). The body of a request refused earlier is never read."""

from __future__ import annotations

import pytest
from api_harness import ORDER_BODY, live

ORDERS = "/api/v1/orders"
JSON = {"Content-Type": "application/json"}
INVALID = {"items": [], "currency": "EUR", "coupon": 1}  # breaks three body rules
MALFORMED = b'{"items": ['
TOO_LARGE = b"{" + b" " * (64 * 1024) + b"}"
UNKNOWN_ORDER = "00000000-0000-4000-8000-000000000000"


def _code(reply: object) -> tuple[int, str | None]:
    return reply.status, reply.code  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "request_options", "expected"),
    [
        # The two conflicts the fault campaign found:
        ("operator, invalid body", {"who": "operator", "key": "k", "body": INVALID}, 403),
        ("no key, invalid body", {"key": None, "body": INVALID}, 400),
        # The rest of the chain, one pair of neighbours at a time:
        ("no token, operator-shaped body", {"who": None, "key": None, "body": INVALID}, 401),
        ("bad token, no key", {"who": "nobody-token", "key": None, "raw": MALFORMED}, 401),
        ("operator, no key", {"who": "operator", "key": None, "body": ORDER_BODY}, 403),
        ("operator, malformed json", {"who": "operator", "key": "k", "raw": MALFORMED}, 403),
        ("operator, too large", {"who": "operator", "key": "k", "raw": TOO_LARGE}, 403),
        ("operator, text/plain", {"who": "operator", "key": "k", "raw": b"x", "ct": None}, 403),
        ("no key, malformed json", {"key": None, "raw": MALFORMED}, 400),
        ("bad key, too large", {"key": "has space", "raw": TOO_LARGE}, 400),
        ("no key, text/plain", {"key": None, "raw": b"{}", "ct": "text/plain"}, 400),
        ("text/plain, too large", {"key": "k", "raw": TOO_LARGE, "ct": "text/plain"}, 415),
        ("text/plain, malformed", {"key": "k", "raw": MALFORMED, "ct": "text/plain"}, 415),
        ("too large, malformed", {"key": "k", "raw": TOO_LARGE[:-1]}, 413),
        ("malformed json", {"key": "k", "raw": MALFORMED}, 400),
        ("invalid body", {"key": "k", "body": INVALID}, 422),
    ],
)
def test_the_first_failed_check_answers_a_create_order(
    name: str, request_options: dict[str, object], expected: int
) -> None:
    options = dict(request_options)
    content_type = options.pop("ct", "application/json")
    headers = {"Content-Type": content_type} if content_type else {}
    codes = {
        401: "unauthenticated",
        403: "forbidden",
        413: "payload_too_large",
        415: "unsupported_media_type",
        422: "validation_failed",
    }
    with live() as api:
        reply = api("POST", ORDERS, headers=headers, **options)  # type: ignore[arg-type]
        assert reply.status == expected, (name, reply.body)
        if expected in codes:
            assert reply.code == codes[expected]
        assert api.world.memory.aggregates == {}


def test_a_missing_key_is_named_before_malformed_json() -> None:
    with live() as api:
        reply = api("POST", ORDERS, key=None, raw=MALFORMED, headers=JSON)
        assert _code(reply) == (400, "idempotency_key_required")


def test_a_customer_asking_for_a_refund_is_forbidden_whatever_the_body_and_headers() -> None:
    with live() as api:
        order_id = api.create().body["order_id"]
        path = f"{ORDERS}/{order_id}/refunds"
        for options in (
            {"key": "r", "body": {"reason": "", "amount_minor": "x"}},
            {"key": None, "body": {"reason": "lost"}},
            {"key": "r", "raw": MALFORMED, "headers": JSON},
            {"key": "r", "raw": b"reason=lost", "headers": {"Content-Type": "text/plain"}},
        ):
            reply = api("POST", path, **options)  # type: ignore[arg-type]
            assert _code(reply) == (403, "forbidden"), options


def test_an_operator_refund_checks_the_key_before_the_body() -> None:
    with live() as api:
        order_id = api.create().body["order_id"]
        reply = api(
            "POST",
            f"{ORDERS}/{order_id}/refunds",
            who="operator",
            key=None,
            raw=MALFORMED,
            headers=JSON,
        )
        assert _code(reply) == (400, "idempotency_key_required")


@pytest.mark.parametrize(
    ("who", "path", "expected"),
    [
        ("customer", "/api/v1/events?limit=0", (403, "forbidden")),
        ("customer", "/api/v1/events?after=x&bogus=1", (403, "forbidden")),
        ("operator", "/api/v1/events?limit=0", (400, "invalid_parameter")),
        (None, "/api/v1/events?limit=0", (401, "unauthenticated")),
        ("customer", f"{ORDERS}/not-a-uuid/audit", (403, "forbidden")),
        # An order that is not the customer's (here: no order at all) is not found, never
        # forbidden: customers learn nothing of each other's orders.
        ("customer", f"{ORDERS}/{UNKNOWN_ORDER}/audit", (404, "not_found")),
        ("operator", f"{ORDERS}/not-a-uuid/audit", (404, "not_found")),
    ],
)
def test_the_role_is_checked_before_the_query_and_the_path(
    who: str | None, path: str, expected: tuple[int, str]
) -> None:
    with live() as api:
        assert _code(api("GET", path, who=who)) == expected


@pytest.mark.parametrize(
    ("who", "suffix", "expected"),
    [
        ("customer", "reconcile", 403),
        ("operator", "cancel", 403),
        (None, "cancel", 401),
        ("customer", "cancel", 404),
    ],
)
def test_an_id_that_names_no_order_is_checked_after_the_role(
    who: str | None, suffix: str, expected: int
) -> None:
    with live() as api:
        assert api("POST", f"{ORDERS}/not-a-uuid/{suffix}", who=who).status == expected
