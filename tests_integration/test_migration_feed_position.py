"""Migration 0015 keeps every published event's feed number and numbers the unpublished ones
after them, so a consumer's `after=N` means the same event before and after it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from orderflow_pg import migration_files

pytestmark = pytest.mark.postgres
T0 = datetime(2026, 5, 1, tzinfo=UTC)
FEED_POSITION = 15


def _event(conn: psycopg.Connection[Any], name: str) -> None:
    conn.execute(
        "INSERT INTO outbox (event_id, order_id, type, payload, created_at)"
        " VALUES (%s, %s, %s, '{}', %s)",
        (uuid.uuid4(), uuid.uuid4(), name, T0),
    )


def _publish(conn: psycopg.Connection[Any], *names: str) -> None:
    for name in names:  # one by one: feed numbers in this order
        conn.execute(
            "UPDATE outbox SET published_at = %s, feed_seq = nextval('outbox_feed_seq')"
            " WHERE type = %s",
            (T0, name),
        )


def test_published_events_keep_their_feed_numbers_and_the_rest_follow_in_outbox_order(
    fresh_database_url: str,
) -> None:
    with psycopg.connect(fresh_database_url, autocommit=True) as conn:
        for file in migration_files():
            if file.version < FEED_POSITION:
                conn.execute(file.sql.encode())
        for name in ("a", "b", "c", "d", "e"):  # outbox seq 1..5
            _event(conn, name)
        _publish(conn, "c", "a")  # c committed late, was published first: feed 1 = c, 2 = a
        for file in migration_files():
            if file.version >= FEED_POSITION:
                conn.execute(file.sql.encode())
        rows = conn.execute("SELECT seq, type FROM outbox ORDER BY seq").fetchall()
        assert rows == [(1, "c"), (2, "a"), (3, "b"), (4, "d"), (5, "e")]
        through = conn.execute("SELECT published_through FROM outbox_feed").fetchone()
        assert through == (2,)
        conn.execute(  # as the store writes one since 0019: numbered within its order
            "INSERT INTO outbox (event_id, order_id, order_seq, type, payload, created_at)"
            " VALUES (%s, %s, 1, 'f', '{}', %s)",
            (uuid.uuid4(), uuid.uuid4(), T0),
        )
        assert conn.execute("SELECT seq FROM outbox WHERE type = 'f'").fetchone() == (6,)
