"""The long-horizon benchmark's fill (bench/longhorizon.py): real orders cloned in SQL with the
tables' keys and indexes dropped for the inserts and built again after, so a database of millions
of finished orders takes minutes. The clones must be the same orders as the originals, under the
same keys, indexes and foreign keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from bench import longhorizon, prefill

pytestmark = pytest.mark.postgres

ORDERS = 4
COPIES = 3

# Every key, foreign key and index of the cloned tables (and their partitions), as defined.
SCHEMA = """
SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
 WHERE contype IN ('p', 'u', 'f', 'x') AND connamespace = 'public'::regnamespace
UNION ALL
SELECT indrelid::regclass::text, indexrelid::regclass::text, pg_get_indexdef(indexrelid)
  FROM pg_index JOIN pg_class ON pg_class.oid = indrelid
 WHERE relnamespace = 'public'::regnamespace
 ORDER BY 1, 2, 3
"""


def _rows(url: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query).fetchall()


def _counts(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {table: longhorizon.exact(conn, table) for table in longhorizon.TABLES}


def test_a_detached_fill_clones_every_row_and_leaves_the_schema_as_it_was(
    pg_url: str, run: Any
) -> None:
    run(prefill.fill(pg_url, ORDERS, concurrency=4, timeout_s=120))
    schema = _rows(pg_url, SCHEMA)
    before = _counts(pg_url)
    assert before["orders"] == ORDERS
    newest = datetime.now(UTC) - timedelta(minutes=10)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        added = longhorizon.clone_orders(conn, COPIES, newest=newest, span_s=86400.0,
                                         detached=True)
    assert added == ORDERS * COPIES
    assert _counts(pg_url) == {table: n * (COPIES + 1) for table, n in before.items()}
    assert _rows(pg_url, SCHEMA) == schema  # every key and index built again, as defined

    # The keys hold again: a clone's id inserted once more is refused, and every clone's rows
    # refer to an order that exists (its steps were cloned with the same mapping).
    with psycopg.connect(pg_url, autocommit=True) as conn:
        clone = conn.execute(
            "SELECT order_id FROM orders WHERE created_at < %s LIMIT 1", (newest,)).fetchone()
        assert clone is not None
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("INSERT INTO orders SELECT * FROM orders WHERE order_id = %s", clone)
    orphans = _rows(pg_url, "SELECT count(*) FROM workflow_steps AS s WHERE NOT EXISTS"
                            " (SELECT 1 FROM orders AS o WHERE o.order_id = s.order_id)")
    assert orphans == [(0,)]
    shipped = _rows(pg_url, "SELECT state, count(*) FROM orders GROUP BY state")
    assert shipped == [("shipped", ORDERS * (COPIES + 1))]
