"""The webhook sink POSTs each event with its id over a real socket; anything but a 2xx, or no
server at all, is a transient failure the relay retries."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from sockets import serving

from orderflow_core import OutboxEvent, Succeeded, Transient
from orderflow_http.webhook import WebhookSink

EVENT = OutboxEvent(
    uuid.UUID(int=7),
    uuid.UUID(int=9),
    "order.shipped",
    {"to": "shipped"},
    datetime(2026, 1, 1, tzinfo=UTC),
    seq=3,
)


@asynccontextmanager
async def receiver(status: int) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append({"headers": dict(request.headers), "body": await request.json()})
        return web.Response(status=status)

    app = web.Application()
    app.router.add_post("/hook", hook)
    async with serving(app) as url:
        yield f"{url}/hook", received


def test_an_event_is_posted_with_its_id_and_a_2xx_counts_as_delivered() -> None:
    async def scenario() -> None:
        async with receiver(204) as (url, received), WebhookSink(url) as sink:
            assert isinstance(await sink(EVENT), Succeeded)
        [delivery] = received
        assert delivery["headers"]["X-Event-Id"] == str(EVENT.event_id)
        assert delivery["body"] == {
            "event_id": str(EVENT.event_id),
            "type": "order.shipped",
            "order_id": str(EVENT.order_id),
            "payload": {"to": "shipped"},
            "created_at": "2026-01-01T00:00:00Z",
        }

    asyncio.run(scenario())


def test_a_refusing_or_missing_webhook_is_a_transient_failure() -> None:
    async def scenario() -> None:
        async with receiver(500) as (url, _), WebhookSink(url) as sink:
            refused = await sink(EVENT)
        async with WebhookSink(url) as sink:  # the server is gone now
            unreachable = await sink(EVENT)
        assert isinstance(refused, Transient)
        assert "500" in refused.detail
        assert isinstance(unreachable, Transient)

    asyncio.run(scenario())
