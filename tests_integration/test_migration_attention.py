"""Migration 0012 stamps the orders that were already waiting for a person when it ran, by the
same reading of the lifecycle as the code's."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from orderflow_pg import migration_files

pytestmark = pytest.mark.postgres
T0 = datetime(2026, 5, 1, tzinfo=UTC)
ATTENTION = 12


def _order(conn: psycopg.Connection[Any], state: str, **fields: Any) -> uuid.UUID:
    order_id = uuid.uuid4()
    conn.execute(
        "INSERT INTO orders (order_id, customer_id, items, total_minor, currency,"
        " process_version, state, created_at, updated_at, reservation_expired)"
        " VALUES (%s, 'c', '[]', 100, 'RUB', 1, %s, %s, %s, %s)",
        (order_id, state, T0, fields.get("updated_at", T0), fields.get("expired", False)),
    )
    return order_id


def _step(
    conn: psycopg.Connection[Any], order_id: uuid.UUID, seq: int, kind: str, status: str
) -> None:
    conn.execute(
        "INSERT INTO workflow_steps (step_id, order_id, kind, seq, status, idempotency_key,"
        " created_at, max_attempts) VALUES (%s, %s, %s, %s, %s, %s, %s, 5)",
        (uuid.uuid4(), order_id, kind, seq, status, f"{order_id}:{kind}:{seq}", T0),
    )


def test_orders_already_waiting_are_stamped_and_the_others_are_not(
    fresh_database_url: str,
) -> None:
    later = T0 + timedelta(minutes=7)
    with psycopg.connect(fresh_database_url, autocommit=True) as conn:
        for file in migration_files():
            if file.version < ATTENTION:
                conn.execute(file.sql.encode())
        shipping_failed = _order(conn, "shipping_failed", updated_at=later)
        _step(conn, shipping_failed, 3, "ship", "failed")
        reserve_failed = _order(conn, "reserving")
        _step(conn, reserve_failed, 1, "reserve", "failed")
        release_blocked = _order(conn, "cancelling")
        _step(conn, release_blocked, 1, "reserve", "succeeded")
        _step(conn, release_blocked, 2, "release_reservation", "blocked")
        gave_up = _order(conn, "payment_unknown")
        _step(conn, gave_up, 2, "charge", "failed")
        _step(conn, gave_up, 3, "reconcile_payment", "failed")
        expired = _order(conn, "payment_unknown", expired=True)
        _step(conn, expired, 2, "charge", "failed")
        _step(conn, expired, 3, "reconcile_payment", "cancelled")
        checking = _order(conn, "payment_unknown")
        _step(conn, checking, 2, "charge", "failed")
        _step(conn, checking, 3, "reconcile_payment", "retry_scheduled")
        shipped = _order(conn, "shipped")
        _step(conn, shipped, 3, "ship", "succeeded")
        failed_then_retried = _order(conn, "reserving")
        _step(conn, failed_then_retried, 1, "reserve", "pending")

        [attention] = [f for f in migration_files() if f.version == ATTENTION]
        conn.execute(attention.sql.encode())
        found = conn.execute(
            "SELECT order_id, attention_reason, attention_since FROM orders"
        ).fetchall()
    stamps = {row[0]: (row[1], row[2]) for row in found}
    assert stamps[shipping_failed] == ("shipping_failed", later)
    assert stamps[reserve_failed] == ("retries_exhausted", T0)
    assert stamps[release_blocked] == ("blocked", T0)
    assert stamps[gave_up] == ("reconcile_gave_up", T0)
    assert stamps[expired] == ("expired_while_unknown", T0)
    for fine in (checking, shipped, failed_then_retried):
        assert stamps[fine] == (None, None)
