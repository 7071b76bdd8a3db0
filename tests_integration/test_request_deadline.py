"""One deadline per request, not per statement: a `POST /orders` replayed over a slow link
to a real PostgreSQL makes four database round trips (token, create, two reads); each alone
fits the statement timeout, together they do not. The request must answer 503 (problem+json,
Retry-After) within its deadline instead of after the sum of them."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from api_harness import ORDER_BODY, TOKENS, make_world, serve
from conftest import Run
from tcp_proxy import PausableProxy

from orderflow_core import OrderService, Role, SystemClock
from orderflow_core.service import hash_token
from orderflow_http.api import create_app
from orderflow_http.api.server import serving
from orderflow_pg import PgOrderStore

pytestmark = pytest.mark.postgres
DEADLINE_S = 3.0
# On top of the deadline: the cut's grace (0.75 s) and a loaded machine. Before the fix the
# replay below took four round trips of 1.4 s each (5.6 s and more).
MARGIN_S = 1.5
TOKEN = "deadline-token-0123456789"
ORDER = {"items": [{"sku": "a", "quantity": 1, "unit_price_minor": 100}], "currency": "RUB"}


@pytest.fixture
def proxy(pg_url: str) -> Iterator[PausableProxy]:
    with PausableProxy.to_database(pg_url) as running:
        yield running


def test_a_replayed_post_over_a_slow_link_answers_503_within_one_request_deadline(
    proxy: PausableProxy, pg_url: str, run: Run[Any]
) -> None:
    async def scenario() -> tuple[int, float, dict[str, Any], str | None, str]:
        async with PgOrderStore.open(proxy.url(pg_url), min_size=2, max_size=4) as store:
            await store.users.create_user("deadline_customer", Role.CUSTOMER, hash_token(TOKEN))
            service = OrderService(store, SystemClock(), store.users)
            app = create_app(service, request_deadline_s=DEADLINE_S)
            async with serving(app, "127.0.0.1", 0) as (host, port), aiohttp.ClientSession() as s:
                url = f"http://{host}:{port}/api/v1/orders"
                headers = {"Authorization": f"Bearer {TOKEN}", "Idempotency-Key": "slow-1"}
                async with s.post(url, json=ORDER, headers=headers) as first:
                    assert first.status == 202, await first.text()
                proxy.reply_delay_s = 1.4  # every answer of the database now takes 1.4 s
                started = time.monotonic()
                async with s.post(url, json=ORDER, headers=headers) as replay:
                    elapsed = time.monotonic() - started
                    body = await replay.json(content_type=None)
                    return (
                        replay.status,
                        elapsed,
                        body,
                        replay.headers.get("Retry-After"),
                        replay.headers["Content-Type"],
                    )

    status, elapsed, body, retry_after, content_type = run(scenario())
    assert elapsed < DEADLINE_S + MARGIN_S, elapsed
    assert (status, body["code"]) == (503, "store_unavailable"), body
    assert retry_after is not None
    assert int(retry_after) >= 1
    assert content_type.startswith("application/problem+json")


def test_a_body_that_arrives_slowly_does_not_use_up_the_request_deadline(run: Run[Any]) -> None:
    """The body has its own deadline (408); the request deadline bounds the work done for the
    request, so a body trickling in for longer than the request deadline is still served."""
    body = json.dumps(ORDER_BODY).encode()

    async def scenario() -> bytes:
        async with serve(make_world().service, request_deadline_s=0.3) as api:
            host, port = api.base.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(
                (
                    "POST /api/v1/orders HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                    f"Authorization: Bearer {TOKENS['customer']}\r\nIdempotency-Key: slow-body\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                ).encode()
            )
            for i in range(0, len(body), 8):  # 1.5 s of trickling: five request deadlines
                writer.write(body[i : i + 8])
                await writer.drain()
                await asyncio.sleep(1.5 / (len(body) / 8))  # the client's pace
            answer = await reader.read()
            writer.close()
            return answer

    answer = run(scenario())
    assert answer.startswith(b"HTTP/1.1 202 "), answer[:200]
