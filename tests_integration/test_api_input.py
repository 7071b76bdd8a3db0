"""The bad-input catalogue: every malformed request gets its documented status and code, never a
5xx, and creates nothing (the store is checked after each one)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import pytest
from api_harness import ORDER_BODY, LiveApi, live
from multidict import CIMultiDict

ORDERS = "/api/v1/orders"
JSON = {"Content-Type": "application/json"}


def _order_text(quantity: str = "2", price: str = "1500", extra: str = "") -> bytes:
    line = f'{{"sku": "SKU-1", "quantity": {quantity}, "unit_price_minor": {price}}}'
    return f'{{"items": [{line}], "currency": "RUB"{extra}}}'.encode()


def _items(count: int) -> bytes:
    line = '{"sku": "S", "quantity": 1, "unit_price_minor": 1}'
    return f'{{"items": [{", ".join([line] * count)}], "currency": "RUB"}}'.encode()


def _assert_nothing_created(api: LiveApi) -> None:
    store = api.world.memory
    assert store.aggregates == {}
    assert store.idempotency == {}
    assert store.outbox == []


# (raw body, status, code, the field named first in `errors` or None)
BODIES = [
    (_order_text(quantity="2.0"), 422, "validation_failed", "items[0].quantity"),
    (_order_text(price="1500.5"), 422, "validation_failed", "items[0].unit_price_minor"),
    (_order_text(price="1e3"), 422, "validation_failed", "items[0].unit_price_minor"),
    (_order_text(quantity='"2"'), 422, "validation_failed", "items[0].quantity"),
    (_order_text(quantity="true"), 422, "validation_failed", "items[0].quantity"),
    (_order_text(price="false"), 422, "validation_failed", "items[0].unit_price_minor"),
    (_order_text(quantity="null"), 422, "validation_failed", "items[0].quantity"),
    (_order_text(price=str(10**30)), 422, "validation_failed", "items[0].unit_price_minor"),
    (_order_text(quantity=str(10**30)), 422, "validation_failed", "items[0].quantity"),
    (_order_text(price=str(10**29)), 422, "validation_failed", "items[0].unit_price_minor"),
    (_order_text(price=str(10**12 + 1)), 422, "validation_failed", "items[0].unit_price_minor"),
    (_order_text(price="9" * 5000), 422, "validation_failed", "items[0].unit_price_minor"),
    (_order_text(price="-1"), 422, "validation_failed", "items[0].unit_price_minor"),
    (_order_text(quantity="0"), 422, "validation_failed", "items[0].quantity"),
    (_order_text(quantity="1001"), 422, "validation_failed", "items[0].quantity"),
    (_order_text(extra=', "coupon": "X"'), 422, "validation_failed", "coupon"),
    (_order_text().replace(b'"SKU-1"', b'"A\\u0000B"'), 422, "validation_failed", "items[0].sku"),
    (_order_text().replace(b'"SKU-1"', b'"A\\nB"'), 422, "validation_failed", "items[0].sku"),
    (_order_text().replace(b'"SKU-1"', b'""'), 422, "validation_failed", "items[0].sku"),
    (_order_text().replace(b'"SKU-1"', b'"' + b"x" * 65 + b'"'), 422, "validation_failed", None),
    (_order_text().replace(b'"SKU-1"', b"7"), 422, "validation_failed", "items[0].sku"),
    (_order_text().replace(b'"RUB"', b'"USD"'), 422, "validation_failed", "currency"),
    (_order_text().replace(b'"RUB"', b'"RUB\\u0000"'), 422, "validation_failed", "currency"),
    (_order_text().replace(b'"RUB"', b"null"), 422, "validation_failed", "currency"),
    (_order_text().replace(b', "unit_price_minor": 1500', b""), 422, "validation_failed", None),
    (_order_text().replace(b"}]", b', "colour": "red"}]'), 422, "validation_failed", None),
    (_items(0), 422, "validation_failed", "items"),
    (_order_text(price="0"), 422, "validation_failed", "items"),
    (_items(101), 422, "validation_failed", "items"),
    (b'{"currency": "RUB"}', 422, "validation_failed", "items"),
    (b'{"items": {}, "currency": "RUB"}', 422, "validation_failed", "items"),
    (b'{"items": [1], "currency": "RUB"}', 422, "validation_failed", "items[0]"),
    (b"[]", 422, "validation_failed", "body"),
    (b'"order"', 422, "validation_failed", "body"),
    (b"null", 422, "validation_failed", "body"),
    (b"", 400, "malformed_json", None),
    (b'{"items": [', 400, "malformed_json", None),
    (_order_text(price="NaN"), 400, "malformed_json", None),
    (_order_text(price="Infinity"), 400, "malformed_json", None),
    (_order_text().replace(b"SKU-1", b"SKU\x001"), 400, "malformed_json", None),
    (_order_text(extra=', "currency": "RUB"'), 400, "malformed_json", None),
    (b"\xef\xbb\xbf" + _order_text(), 400, "malformed_json", None),
    (_order_text().replace(b"SKU-1", b"SKU\xff"), 400, "malformed_json", None),
    (b"[" * 30000 + b"]" * 30000, 400, "malformed_json", None),
    (b"{} {}", 400, "malformed_json", None),
]


@pytest.mark.parametrize(("raw", "status", "code", "field"), BODIES)
def test_a_bad_order_body_is_refused_and_creates_nothing(
    raw: bytes, status: int, code: str, field: str | None
) -> None:
    with live() as api:
        reply = api("POST", ORDERS, raw=raw, key="k", headers=JSON)
        assert (reply.status, reply.code) == (status, code), reply.body
        if field is not None:
            assert reply.body["errors"][0]["field"] == field, reply.body["errors"]
        _assert_nothing_created(api)


def test_every_broken_rule_is_listed_in_one_answer() -> None:
    with live() as api:
        raw = _order_text(quantity="1.5", price='"x"', extra=', "coupon": 1')
        reply = api("POST", ORDERS, raw=raw, key="k", headers=JSON)
        fields = {e["field"] for e in reply.body["errors"]}
        assert fields == {"coupon", "items[0].quantity", "items[0].unit_price_minor"}


def test_the_limits_themselves_are_accepted() -> None:
    with live() as api:
        assert api("POST", ORDERS, raw=_items(100), key="a", headers=JSON).status == 202
        edge = _order_text(quantity="1000", price=str(10**12))
        assert api("POST", ORDERS, raw=edge, key="b", headers=JSON).status == 202
        free_line = b'{"sku": "FREE", "quantity": 1, "unit_price_minor": 0}, '
        one_free = _order_text().replace(b'[{"sku"', b"[" + free_line + b'{"sku"')
        assert api("POST", ORDERS, raw=one_free, key="c", headers=JSON).status == 202


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin-1"],
)
def test_a_body_that_is_not_application_json_is_unsupported(content_type: str | None) -> None:
    with live() as api:
        headers = {"Content-Type": content_type} if content_type else {}
        reply = api("POST", ORDERS, raw=_order_text(), key="k", headers=headers)
        assert (reply.status, reply.code) == (415, "unsupported_media_type")
        _assert_nothing_created(api)


def test_application_json_with_a_utf8_charset_is_accepted() -> None:
    with live() as api:
        headers = {"Content-Type": "application/json; charset=UTF-8"}
        assert api("POST", ORDERS, raw=_order_text(), key="k", headers=headers).status == 202


def _padded(size: int) -> bytes:
    body = _order_text()
    return body + b" " * (size - len(body))


def test_a_body_of_exactly_64_kib_is_accepted() -> None:
    with live() as api:
        assert api("POST", ORDERS, raw=_padded(64 * 1024), key="k", headers=JSON).status == 202


def test_a_body_of_64_kib_and_one_byte_is_too_large() -> None:
    with live() as api:
        reply = api("POST", ORDERS, raw=_padded(64 * 1024 + 1), key="k", headers=JSON)
        assert (reply.status, reply.code) == (413, "payload_too_large")
        _assert_nothing_created(api)


def test_a_chunked_body_without_a_length_is_cut_off_at_64_kib() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(20):
            yield b" " * 4096
        yield _order_text()

    with live() as api:
        url = f"{api.api.base}{ORDERS}"
        headers = {"Authorization": "Bearer tok-customer", "Idempotency-Key": "k", **JSON}

        async def send() -> tuple[int, bytes]:
            async with api.api.session.post(url, data=chunks(), headers=headers) as response:
                return response.status, await response.read()

        status, body = api.run(send())
        assert status == 413
        assert b"payload_too_large" in body
        _assert_nothing_created(api)


@pytest.mark.parametrize(
    ("key", "code"),
    [
        (None, "idempotency_key_required"),
        ("", "invalid_idempotency_key"),
        ("has space", "invalid_idempotency_key"),
        ("x" * 256, "invalid_idempotency_key"),
        ("tab\there", "invalid_idempotency_key"),
        ("ключ", "invalid_idempotency_key"),
    ],
)
def test_a_missing_or_malformed_idempotency_key_is_refused(key: str | None, code: str) -> None:
    with live() as api:
        reply = api("POST", ORDERS, body=ORDER_BODY, key=key)
        assert (reply.status, reply.code) == (400, code)
        _assert_nothing_created(api)


def test_an_idempotency_key_sent_twice_is_invalid() -> None:
    with live() as api:
        headers = CIMultiDict([("Idempotency-Key", "a"), ("Idempotency-Key", "b")])
        reply = api("POST", ORDERS, body=ORDER_BODY, headers=headers)
        assert (reply.status, reply.code) == (400, "invalid_idempotency_key")
        _assert_nothing_created(api)


def test_a_key_of_255_visible_characters_is_accepted() -> None:
    with live() as api:
        assert api("POST", ORDERS, body=ORDER_BODY, key="~" * 255).status == 202


QUERIES = [
    f"{ORDERS}?limit=0",
    f"{ORDERS}?limit=101",
    f"{ORDERS}?limit=-1",
    f"{ORDERS}?limit=abc",
    f"{ORDERS}?limit=1.5",
    f"{ORDERS}?limit=",
    f"{ORDERS}?limit={10**30}",
    f"{ORDERS}?limit=%00",
    f"{ORDERS}?limit=1&limit=2",
    f"{ORDERS}?state=bogus",
    f"{ORDERS}?state=",
    f"{ORDERS}?state=SHIPPED",
    f"{ORDERS}?cursor=garbage",
    f"{ORDERS}?cursor=%00",
    f"{ORDERS}?cursor=fA",
    f"{ORDERS}?page=2",
    "/api/v1/events?after=-1",
    "/api/v1/events?after=abc",
    f"/api/v1/events?after={10**30}",
    "/api/v1/events?limit=0",
    "/api/v1/events?limit=1001",
    "/api/v1/events?since=1",
]


@pytest.mark.parametrize("path", QUERIES)
def test_a_query_parameter_out_of_range_is_an_invalid_parameter(path: str) -> None:
    with live() as api:
        reply = api("GET", path, who="operator")
        assert (reply.status, reply.code) == (400, "invalid_parameter")


ODD_IDS = [
    "not-a-uuid",
    "%00",
    "00000000000040008000000000000000",
    "%7B00000000-0000-4000-8000-000000000000%7D",
    "urn:uuid:00000000-0000-4000-8000-000000000000",
    "00000000-0000-4000-8000-0000000000000",
    "x" * 2000,
    "%D0%B7%D0%B0%D0%BA%D0%B0%D0%B7",
    "..%2F..%2Fetc",
]


@pytest.mark.parametrize("order_id", ODD_IDS)
@pytest.mark.parametrize(
    ("method", "suffix", "who"),
    [
        ("GET", "", "customer"),
        ("POST", "/cancel", "customer"),
        ("POST", "/retry", "operator"),
        ("POST", "/reconcile", "operator"),
        ("GET", "/audit", "operator"),
    ],
)
def test_an_id_that_is_not_a_uuid_names_no_order(
    order_id: str, method: str, suffix: str, who: str
) -> None:
    with live() as api:
        reply = api(method, f"{ORDERS}/{order_id}{suffix}", who=who)
        assert (reply.status, reply.code) == (404, "not_found")


def test_an_uppercase_uuid_names_the_same_order() -> None:
    with live() as api:
        order_id = api.create().body["order_id"]
        assert api("GET", f"{ORDERS}/{order_id.upper()}").body["order_id"] == order_id


REFUND_BODIES = [
    (b'{"reason": "x", "amount_minor": 1.0}', 422, "amount_minor"),
    (b'{"reason": "x", "amount_minor": "100"}', 422, "amount_minor"),
    (b'{"reason": "x", "amount_minor": true}', 422, "amount_minor"),
    (b'{"reason": "x", "amount_minor": null}', 422, "amount_minor"),
    (f'{{"reason": "x", "amount_minor": {10**30}}}'.encode(), 422, "amount_minor"),
    (b'{"reason": "x", "amount_minor": 0}', 422, "amount_minor"),
    (b'{"reason": "x", "amount_minor": -5}', 422, "amount_minor"),
    (b'{"reason": "x", "amount_minor": 3001}', 422, "amount_minor"),
    (b'{"amount_minor": 100}', 422, "reason"),
    (b'{"reason": ""}', 422, "reason"),
    (b'{"reason": "a\\u0000b"}', 422, "reason"),
    (b'{"reason": 5}', 422, "reason"),
    (b'{"reason": "x", "currency": "RUB"}', 422, "currency"),
    (b'{"reason": "x"', 400, None),
]


@pytest.mark.parametrize(("raw", "status", "field"), REFUND_BODIES)
def test_a_bad_refund_body_is_refused_and_requests_no_refund(
    raw: bytes, status: int, field: str | None
) -> None:
    with live() as api:
        api.world.sim.script("shipping", "ship", ["permanent"])
        order_id = api.create().body["order_id"]
        api.drive()
        path = f"{ORDERS}/{order_id}/refunds"
        reply = api("POST", path, who="operator", key="r", raw=raw, headers=JSON)
        assert reply.status == status, reply.body
        if field is not None:
            assert reply.body["errors"][0]["field"] == field
        aggregate = next(iter(api.world.memory.aggregates.values()))
        assert aggregate.refunds == ()


def test_a_client_that_goes_away_mid_body_is_no_internal_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    head = (
        b"POST /api/v1/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-customer\r\n"
        b"Idempotency-Key: k\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
    )

    async def send_half_and_leave(port: int) -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head + b'{"items": [')
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        deadline = time.monotonic() + 10
        while not any("went away" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, caplog.text
            assert not any(r.levelno >= logging.ERROR for r in caplog.records), caplog.text
            await asyncio.sleep(0.01)  # a polling interval; the deadline bounds the wait

    with caplog.at_level(logging.DEBUG, logger="orderflow"), live() as api:
        api.run(send_half_and_leave(int(api.api.base.rsplit(":", 1)[1])))
        assert api("GET", "/healthz").status == 200
        _assert_nothing_created(api)
    assert not any(r.levelno >= logging.WARNING for r in caplog.records)
    assert "Traceback" not in caplog.text
