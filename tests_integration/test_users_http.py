"""Two real customers and an operator against a real `orderflow api` process: a customer
never sees, touches or even learns of another customer's orders; idempotency keys are per user;
a disabled user or a rotated token is refused within the token cache time; an operator sees all.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from processes import OPERATOR_TOKEN, Proc, base_env, eventually
from user_commands import call, new_user, user_cli

pytestmark = pytest.mark.postgres
CACHE_S = 1.0  # ORDERFLOW_TOKEN_CACHE_S of the server under test
ORDER = {"items": [{"sku": "book", "quantity": 1, "unit_price_minor": 990}], "currency": "RUB"}


@pytest.fixture
def api(pg_url: str) -> Iterator[str]:
    """`orderflow api` on this test's database (no executor: orders stay where they are)."""
    env = base_env(
        ORDERFLOW_DATABASE_URL=pg_url,
        ORDERFLOW_HTTP_PORT="0",
        ORDERFLOW_TOKEN_CACHE_S=str(CACHE_S),
    )
    proc = Proc("api", env)
    try:
        base = proc.wait_for(r"orderflow API: (http://\S+)/api/v1", timeout_s=60).group(1)
        eventually(lambda: call("GET", f"{base}/readyz", None)[0] == 200, what="/readyz")
        yield f"{base}/api/v1"
        assert proc.terminate() == 0
    finally:
        proc.close()


def _create(api: str, token: str, key: str) -> dict[str, Any]:
    status, body, headers = call("POST", f"{api}/orders", token, ORDER, key=key)
    assert status == 202, body
    assert "Idempotent-Replayed" not in headers
    return dict(body)


def _listed(api: str, token: str, query: str = "", limit: int = 1) -> list[str]:
    """Every order id the caller's list shows, following the cursors page by page."""
    ids: list[str] = []
    cursor = ""
    while True:
        url = f"{api}/orders?limit={limit}{query}{cursor}"
        status, body, _ = call("GET", url, token)
        assert status == 200, body
        ids += [o["order_id"] for o in body["orders"]]
        if body["next_cursor"] is None:
            return ids
        cursor = f"&cursor={body['next_cursor']}"


def _cursor_after_first(api: str, token: str) -> str:
    status, body, _ = call("GET", f"{api}/orders?limit=1", token)
    assert status == 200
    assert body["next_cursor"] is not None
    return str(body["next_cursor"])


def test_two_customers_see_and_touch_only_their_own_orders(api: str, pg_url: str) -> None:
    alice = new_user(pg_url, "alice", "customer")
    bob = new_user(pg_url, "bob", "customer")
    ops = new_user(pg_url, "ops-1", "operator")

    # The same Idempotency-Key from two customers makes two orders.
    a1, a2, a3 = (_create(api, alice, f"k{n}") for n in (1, 2, 3))
    b1, b2 = (_create(api, bob, f"k{n}") for n in (1, 2))
    assert a1["order_id"] != b1["order_id"]
    assert (a1["customer_id"], b1["customer_id"]) == ("alice", "bob")
    status, replay, headers = call("POST", f"{api}/orders", bob, ORDER, key="k1")
    assert (status, replay["order_id"], headers.get("Idempotent-Replayed")) == (
        202,
        b1["order_id"],
        "true",
    )
    status, cancelled, _ = call("POST", f"{api}/orders/{a3['order_id']}/cancel", alice)
    assert (status, cancelled["state"]) == (200, "cancelled")

    # Everything bob may try on alice's order: 404 not_found, as for an order that does not
    # exist, and alice's order is exactly as it was.
    target = a1["order_id"]
    before = call("GET", f"{api}/orders/{target}", ops)[1]
    attempts = [
        ("GET", "", None, None),
        ("POST", "/cancel", None, None),
        ("POST", "/retry", None, None),
        ("POST", "/reconcile", None, None),
        ("GET", "/audit", None, None),
        ("POST", "/refunds", {"reason": "mine now"}, "refund-1"),
    ]
    for method, suffix, body, key in attempts:
        for order_id in (target, str(uuid.uuid4())):
            status, problem, _ = call(method, f"{api}/orders/{order_id}{suffix}", bob, body, key)
            assert (status, problem["code"]) == (404, "not_found"), (method, suffix, problem)
            assert not {"state", "items", "customer_id", "entries"} & set(problem)
    assert call("GET", f"{api}/orders/{target}", ops)[1] == before
    # On her own order alice gets the role answer: she is no operator.
    for method, suffix, body, key in attempts[3:]:
        status, problem, _ = call(method, f"{api}/orders/{target}{suffix}", alice, body, key)
        assert (status, problem["code"]) == (403, "forbidden"), (method, suffix)

    # Lists: only one's own, whatever the filter, and whatever cursor is sent.
    mine = [a3["order_id"], a2["order_id"], a1["order_id"]]  # newest first
    assert _listed(api, alice) == mine
    assert _listed(api, alice, "&state=created") == mine[1:]
    assert _listed(api, alice, "&state=cancelled") == [a3["order_id"]]
    assert _listed(api, bob) == [b2["order_id"], b1["order_id"]]
    assert _listed(api, bob, "&state=cancelled") == []
    alices_cursor = _cursor_after_first(api, alice)  # points between alice's orders
    status, page, _ = call("GET", f"{api}/orders?limit=100&cursor={alices_cursor}", bob)
    assert status == 200
    assert {o["customer_id"] for o in page["orders"]} <= {"bob"}
    assert {o["order_id"] for o in page["orders"]} <= {b1["order_id"], b2["order_id"]}

    # An operator (a seeded one or an added one) sees every order.
    everyone = {o["order_id"] for o in (a1, a2, a3, b1, b2)}
    for operator in (ops, OPERATOR_TOKEN):
        assert set(_listed(api, operator, limit=100)) == everyone
        assert call("GET", f"{api}/orders/{b1['order_id']}", operator)[0] == 200

    # The audit log and the events name the customer who acted.
    status, audit, _ = call("GET", f"{api}/orders/{a3['order_id']}/audit", ops)
    assert status == 200
    actors = {e["action"]: e["actor"] for e in audit["entries"]}
    assert actors["order.created"] == "customer:alice"
    assert actors["order.cancel"] == "customer:alice"
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT type, payload->>'actor' FROM outbox WHERE order_id = %s ORDER BY seq",
            (a3["order_id"],),
        ).fetchall()
    assert rows == [("order.created", "customer:alice"), ("order.cancelled", "customer:alice")]


def _refused_within(api: str, token: str, deadline_s: float) -> float:
    """Seconds until the token is refused with 401 (polled; fails after `deadline_s`)."""
    started = time.monotonic()
    eventually(
        lambda: call("GET", f"{api}/orders", token)[0] == 401,
        timeout_s=deadline_s,
        what="401 for the token",
    )
    return time.monotonic() - started


def test_a_disabled_user_is_refused_within_the_cache_time_and_enabled_at_once(
    api: str, pg_url: str
) -> None:
    alice = new_user(pg_url, "alice", "customer")
    assert call("GET", f"{api}/orders", alice)[0] == 200  # now remembered by the API
    disabled = user_cli(pg_url, "disable", "alice")
    assert disabled.returncode == 0, disabled.stderr
    assert "ORDERFLOW_TOKEN_CACHE_S" in disabled.stderr
    _refused_within(api, alice, CACHE_S + 5)
    status, problem, headers = call("GET", f"{api}/orders", alice)
    assert (status, problem["code"]) == (401, "unauthenticated")
    assert headers["WWW-Authenticate"].startswith("Bearer")
    [shown] = json.loads(user_cli(pg_url, "list", "--json").stdout)["users"][2:]
    assert shown["name"] == "alice"
    assert shown["status"] == "disabled"
    assert shown["last_used_at"] is not None  # the requests above

    assert user_cli(pg_url, "enable", "alice").returncode == 0
    assert call("GET", f"{api}/orders", alice)[0] == 200  # a refused token is never remembered


def test_rotation_takes_effect_for_the_new_token_at_once_and_the_old_within_the_cache_time(
    api: str, pg_url: str
) -> None:
    old = new_user(pg_url, "bob", "customer")
    order = _create(api, old, "before-rotation")
    rotated = user_cli(pg_url, "rotate", "bob")
    assert rotated.returncode == 0, rotated.stderr
    new = rotated.stdout.strip()
    assert len(new) >= 32
    assert new != old
    status, body, _ = call("GET", f"{api}/orders/{order['order_id']}", new)
    assert (status, body["customer_id"]) == (200, "bob")  # same user, same orders
    _refused_within(api, old, CACHE_S + 5)
    assert call("GET", f"{api}/orders", new)[0] == 200
    listed = user_cli(pg_url, "list", "--json").stdout
    assert old not in listed
    assert new not in listed
