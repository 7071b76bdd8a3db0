"""Concurrent creates share a commit (the API's `POST /orders` under load): one statement for
what queued together, and a create that fails (a reused idempotency key) fails alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from builders import creation, new_order
from conftest import Run

from orderflow_core.errors import DuplicateIdempotencyKey
from orderflow_pg import PgOrderStore, write_engine

pytestmark = pytest.mark.postgres


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many documents each write statement of the store carried."""
    sent: list[int] = []
    real = write_engine.apply_documents

    async def counting(conn: Any, docs: list[Any]) -> Any:
        if docs:
            sent.append(len(docs))
        return await real(conn, docs)

    monkeypatch.setattr(write_engine, "apply_documents", counting)
    return sent


def test_creates_queued_together_commit_in_one_statement(
    pg_store: PgOrderStore, statements: list[int], run: Run[Any]
) -> None:
    orders = [new_order() for _ in range(10)]

    async def all_at_once() -> None:
        await asyncio.gather(
            *(pg_store.create(creation(o, key=f"k{i}")) for i, o in enumerate(orders))
        )

    run(all_at_once())
    assert sum(statements) == 10
    assert len(statements) <= 2, statements
    for order in orders:
        assert run(pg_store.load(order.order_id)) is not None


def test_a_create_reusing_a_key_fails_alone_and_the_others_commit(
    pg_store: PgOrderStore, statements: list[int], run: Run[Any]
) -> None:
    first = new_order()
    run(pg_store.create(creation(first, key="taken")))
    reused, others = new_order(), [new_order() for _ in range(4)]

    async def together() -> list[BaseException | None]:
        changes = [creation(reused, key="taken")] + [
            creation(o, key=f"free-{i}") for i, o in enumerate(others)
        ]
        return await asyncio.gather(*(pg_store.create(c) for c in changes), return_exceptions=True)

    results = run(together())
    assert isinstance(results[0], DuplicateIdempotencyKey)
    assert results[1:] == [None] * 4
    assert run(pg_store.load(reused.order_id)) is None
    for order in others:
        assert run(pg_store.load(order.order_id)) is not None
