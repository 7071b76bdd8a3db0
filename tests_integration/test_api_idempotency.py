"""Create-order idempotency over a real socket: replay, reuse with another body, per-user keys,
and concurrent requests with one key (in memory and on PostgreSQL)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from api_harness import ORDER_BODY, LiveApi, Reply, live, make_world

from orderflow_core.model import Order

ORDERS = "/api/v1/orders"
OTHER_BODY = {"items": [{"sku": "SKU-2", "quantity": 1, "unit_price_minor": 10}], "currency": "RUB"}


def test_the_same_key_and_body_replays_the_same_order_and_creates_nothing() -> None:
    with live() as api:
        first = api.create(key="same")
        again = api("POST", ORDERS, key="same", body=ORDER_BODY)
        assert again.status == 202
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.headers["Location"] == first.headers["Location"]
        assert again.body["order_id"] == first.body["order_id"]
        assert len(api.world.memory.aggregates) == 1


def test_a_replay_is_recognised_whatever_the_json_spelling() -> None:
    with live() as api:
        first = api.create(key="same")
        raw = (
            b'{ "currency":"RUB",\n "items":[{"unit_price_minor":1500,"quantity":2,"sku":"SKU-1"}]}'
        )
        headers = {"Content-Type": "application/json"}
        again = api("POST", ORDERS, key="same", raw=raw, headers=headers)
        assert again.headers.get("Idempotent-Replayed") == "true"
        assert again.body["order_id"] == first.body["order_id"]


def test_the_same_key_with_another_body_is_refused_and_creates_nothing() -> None:
    with live() as api:
        api.create(key="same")
        reply = api("POST", ORDERS, key="same", body=OTHER_BODY)
        assert (reply.status, reply.code) == (422, "idempotency_key_reused")
        assert len(api.world.memory.aggregates) == 1


def test_keys_belong_to_one_user() -> None:
    with live() as api:
        mine = api.create(key="same").body["order_id"]
        theirs = api.create(who="other", key="same")
        assert "Idempotent-Replayed" not in theirs.headers
        assert theirs.body["order_id"] != mine


async def _create_many(api: LiveApi, count: int, bodies: list[Any]) -> list[Reply]:
    calls = [
        api.api.call("POST", ORDERS, key="race", body=bodies[n % len(bodies)]) for n in range(count)
    ]
    return list(await asyncio.gather(*calls))


def _assert_one_order(replies: list[Reply], orders: list[Order]) -> None:
    assert {r.status for r in replies} == {202}
    assert len({r.body["order_id"] for r in replies}) == 1
    assert sum("Idempotent-Replayed" not in r.headers for r in replies) == 1
    assert [str(o.order_id) for o in orders] == [replies[0].body["order_id"]]


def test_concurrent_requests_with_one_key_create_one_order() -> None:
    with live() as api:
        replies = api.run(_create_many(api, 20, [ORDER_BODY]))
        _assert_one_order(replies, [a.order for a in api.world.memory.aggregates.values()])


def test_concurrent_requests_with_one_key_and_two_bodies_create_one_order() -> None:
    with live() as api:
        replies = api.run(_create_many(api, 10, [ORDER_BODY, OTHER_BODY]))
        accepted = [r for r in replies if r.status == 202]
        refused = [r for r in replies if r.status != 202]
        assert {r.code for r in refused} == {"idempotency_key_reused"}
        assert len({r.body["order_id"] for r in accepted}) == 1
        assert len(api.world.memory.aggregates) == 1


@pytest.mark.postgres
def test_concurrent_requests_with_one_key_create_one_order_on_postgresql(
    pg_store: Any, run: Any
) -> None:
    with live(make_world(pg_store), run=run) as api:
        replies = api.run(_create_many(api, 20, [ORDER_BODY]))
        orders = api.run(pg_store.list_orders(customer_id=None, state=None, limit=100, before=None))
        _assert_one_order(replies, orders)


@pytest.mark.citus
def test_concurrent_requests_with_one_key_create_one_order_on_a_citus_cluster(
    citus_store: Any, run: Any
) -> None:
    """The create's order and key on one shard: 20 racing requests, one order, each reply it."""
    with live(make_world(citus_store), run=run) as api:
        replies = api.run(_create_many(api, 20, [ORDER_BODY]))
        orders = api.run(
            citus_store.list_orders(customer_id=None, state=None, limit=100, before=None)
        )
        _assert_one_order(replies, orders)
