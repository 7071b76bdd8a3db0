"""The clients read every kind of answer a real server can give through one table."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from sockets import serving

from orderflow_core.model import Item
from orderflow_core.outcomes import (
    Broken,
    Outcome,
    Refused,
    Succeeded,
    Transient,
    UnknownOutcome,
)
from orderflow_core.ports import CallContext
from orderflow_http.clients import HttpPayments, HttpShipping, HttpWarehouse, parse_retry_after

ITEMS = [Item("SKU-1", 1, 100)]


async def invoke(url: str, operation: str, ctx: CallContext) -> Outcome:
    """Call `operation` once through a fresh client of its service, closing it after."""
    async with (
        HttpWarehouse(url) as warehouse,
        HttpPayments(url) as payments,
        HttpShipping(url) as shipping,
    ):
        if operation == "reserve":
            return await warehouse.reserve(ctx, ITEMS)
        if operation == "release":
            return await warehouse.release(ctx, "rk")
        if operation == "charge":
            return await payments.charge(ctx, 1, "RUB")
        if operation == "status":
            return await payments.charge_status(ctx, "ck")
        if operation == "refund":
            return await payments.refund(ctx, "p", 1)
        return await shipping.ship(ctx, ITEMS)


@asynccontextmanager
async def canned_server(
    status: int, body: bytes, headers: dict[str, str]
) -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """A server that answers every request with one canned response, recording the headers."""
    seen: list[dict[str, str]] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        await request.read()
        return web.Response(status=status, body=body, headers=headers)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    async with serving(app) as url:
        yield url, seen


TABLE = [
    ("charge", 201, b'{"payment_reference": "p", "status": "succeeded"}', {}, Succeeded),
    ("charge", 201, b"<html>ok</html>", {}, Broken),
    ("charge", 201, b'{"status": "succeeded"}', {}, Broken),
    ("charge", 202, b'{"status": "pending"}', {}, UnknownOutcome),
    ("charge", 402, b'{"code": "card_declined"}', {}, Refused),
    ("charge", 400, b'{"code": "bad_request"}', {}, Broken),
    ("charge", 409, b'{"code": "conflict"}', {}, Broken),
    ("charge", 429, b"", {}, Broken),
    ("charge", 302, b"", {"Location": "/elsewhere"}, Broken),
    ("charge", 500, b"<html>oops</html>", {}, Transient),
    ("charge", 503, b"", {"Retry-After": "2"}, Transient),
    ("status", 200, b'{"status": "failed"}', {}, Succeeded),
    ("status", 404, b'{"code": "not_found"}', {}, Refused),
    ("status", 404, b"not found", {}, Broken),
    ("reserve", 409, b'{"code": "out_of_stock"}', {}, Refused),
    ("release", 200, b'{"status": "released"}', {}, Succeeded),
    ("refund", 409, b'{"code": "refund_rejected"}', {}, Refused),
    ("ship", 422, b'{"code": "undeliverable"}', {}, Refused),
    ("ship", 422, b'{"code": "validation_failed"}', {}, Broken),
]


@pytest.mark.parametrize(("operation", "status", "body", "headers", "expected"), TABLE)
def test_the_client_classifies_each_kind_of_answer(
    operation: str, status: int, body: bytes, headers: dict[str, str], expected: type
) -> None:
    async def main() -> tuple[Outcome, list[dict[str, str]]]:
        ctx = CallContext(uuid.uuid4(), uuid.uuid4(), "k/1")
        async with canned_server(status, body, headers) as (url, seen):
            return await invoke(url, operation, ctx), seen

    outcome, seen = asyncio.run(main())
    assert type(outcome) is expected
    assert len(seen) == 1
    assert seen[0]["Idempotency-Key"] == "k/1"
    assert {"X-Order-Id", "X-Step-Id"} <= set(seen[0])
    if "Retry-After" in headers:
        assert outcome == Transient(detail="charge: HTTP 503", retry_after_s=2.0)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("3", 3.0),
        ("0.5", 0.5),
        ("-4", 0.0),
        ("soon", None),
        (None, None),
        ("inf", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
    ],
)
def test_retry_after_is_parsed_as_seconds_or_an_http_date(
    header: str | None, expected: float | None
) -> None:
    assert parse_retry_after(header) == expected
