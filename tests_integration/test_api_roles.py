"""Who may do what: no token, a bad token, the owner, another customer, an operator.

Every cell uses a fresh order owned by `customer` in `created`, so a cell's answer depends only on
who asks. "Allowed" cells answer what the state allows (a retry with nothing failed is 409).
"""

from __future__ import annotations

import asyncio

import pytest
from api_harness import ORDER_BODY, live

WHO = ("nobody", "bad-token", "customer", "other", "operator")

ORDER = "/api/v1/orders/{id}"

# (method, path, body, expected status per WHO)
MATRIX = [
    ("POST", "/api/v1/orders", "order", (401, 401, 202, 202, 403)),
    ("GET", "/api/v1/orders", None, (401, 401, 200, 200, 200)),
    ("GET", ORDER, None, (401, 401, 200, 404, 200)),
    ("POST", f"{ORDER}/cancel", None, (401, 401, 200, 404, 403)),
    ("POST", f"{ORDER}/retry", None, (401, 401, 409, 404, 409)),
    ("POST", f"{ORDER}/reconcile", None, (401, 401, 403, 404, 409)),
    ("POST", f"{ORDER}/refunds", "refund", (401, 401, 403, 404, 409)),
    ("GET", f"{ORDER}/audit", None, (401, 401, 403, 404, 200)),
    ("GET", "/api/v1/events", None, (401, 401, 403, 403, 200)),
    ("GET", "/api/v1/openapi.json", None, (200, 200, 200, 200, 200)),
    ("GET", "/healthz", None, (200, 200, 200, 200, 200)),
    ("GET", "/readyz", None, (200, 200, 200, 200, 200)),
]
CASES = [
    pytest.param(method, where, body, who, expected[i], id=f"{method} {where} as {who}")
    for method, where, body, expected in MATRIX
    for i, who in enumerate(WHO)
]
BODIES = {"order": ORDER_BODY, "refund": {"reason": "lost"}, None: None}
CODES = {401: "unauthenticated", 403: "forbidden", 404: "not_found"}


@pytest.mark.parametrize(("method", "where", "body", "who", "expected"), CASES)
def test_each_role_gets_the_answer_the_role_table_gives(
    method: str, where: str, body: str | None, who: str, expected: int
) -> None:
    with live() as api:
        order_id = api.create(key="owner-order").body["order_id"]
        path = where.format(id=order_id)
        caller = {"nobody": None, "bad-token": "no-such-token"}.get(who, who)
        reply = api(method, path, who=caller, key="k-1", body=BODIES[body])
        assert reply.status == expected, reply.body
        if expected in CODES:
            assert reply.code == CODES[expected]
        if expected == 401:
            assert reply.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "authorization",
    ["Basic dG9rLWN1c3RvbWVy", "Bearer", "Bearer ", "tok-customer", "Bearer tok-customer2"],
)
def test_anything_but_a_known_bearer_token_is_unauthenticated(authorization: str) -> None:
    with live() as api:
        reply = api("GET", "/api/v1/orders", who=None, headers={"Authorization": authorization})
        assert (reply.status, reply.code) == (401, "unauthenticated")


def test_the_bearer_scheme_is_case_insensitive() -> None:
    with live() as api:
        headers = {"Authorization": "bearer tok-customer"}
        assert api("GET", "/api/v1/orders", who=None, headers=headers).status == 200


def test_another_customer_can_neither_see_nor_touch_an_order() -> None:
    with live() as api:
        order_id = api.create().body["order_id"]
        before = dict(api.world.memory.aggregates)
        for method, suffix in [("GET", ""), ("POST", "/cancel"), ("POST", "/retry")]:
            reply = api(method, f"/api/v1/orders/{order_id}{suffix}", who="other")
            assert (reply.status, reply.code) == (404, "not_found")
        assert api("GET", "/api/v1/orders", who="other").body["orders"] == []
        assert dict(api.world.memory.aggregates) == before


async def _raw_exchange(base: str, request: bytes) -> bytes:
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        return await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()


def test_a_token_of_undecodable_bytes_is_unauthenticated_not_a_crash() -> None:
    with live() as api:
        request = (
            b"GET /api/v1/orders HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Authorization: Bearer \xff\xfe\r\n\r\n"
        )
        answer = api.run(_raw_exchange(api.api.base, request))
        assert answer.startswith(b"HTTP/1.1 401 ")
        assert b'"code": "unauthenticated"' in answer
