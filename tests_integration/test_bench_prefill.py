"""The benchmark's steady-state database (bench/prefill.py): orders run to the end through the
real path, the tables analyzed, and the run's own counts leave the filled orders out."""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import psycopg
import pytest

from bench import load, prefill

pytestmark = pytest.mark.postgres

ORDERS = 12


def _one(url: str, query: str) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def test_filled_orders_are_shipped_analyzed_and_left_out_of_a_runs_counts(
    pg_url: str, run: Any
) -> None:
    filled = run(prefill.fill(pg_url, ORDERS, concurrency=4, timeout_s=120))
    assert filled.orders == ORDERS
    assert filled.since is not None
    assert _one(pg_url, "SELECT count(*) FROM orders WHERE state = 'shipped'") == ORDERS
    assert _one(pg_url, prefill.LIVE_STEPS) == 0
    assert _one(pg_url, prefill.UNPUBLISHED) == 0  # as a running service's relay would have
    assert _one(pg_url, "SELECT count(*) FROM outbox") >= 6 * ORDERS
    # ANALYZE ran: the planner has statistics (and row counts) for the hot tables
    assert _one(pg_url, "SELECT reltuples FROM pg_class WHERE relname = 'orders'") == ORDERS
    analyzed = "SELECT count(*) FROM pg_stats WHERE tablename = 'workflow_steps'"
    assert _one(pg_url, analyzed) > 0

    everything = run(load.outcome_counts(pg_url))
    assert everything["states"] == {"shipped": ORDERS}
    assert everything["attempts_finished"] >= 3 * ORDERS  # reserve, charge, ship at least
    assert len(everything["flow_s"]) == ORDERS
    runs_own = run(load.outcome_counts(pg_url, filled.since))
    assert runs_own["states"] == {}
    assert runs_own["attempts_finished"] == 0
    assert runs_own["flow_s"] == []


def test_nothing_to_fill_leaves_the_database_as_it_was(pg_url: str, run: Any) -> None:
    assert run(prefill.fill(pg_url, 0)) == prefill.Filled(0, None)
    assert _one(pg_url, "SELECT count(*) FROM orders") == 0


def test_the_simulated_services_answer_after_the_latency_asked_for(run: Any) -> None:
    """`Mocks(latency_ms)` (what `bench.worker_only --latency` runs against) holds each call
    at least that long; a lower bound only, never a speed."""
    async def first_call(base: str) -> float:
        async with aiohttp.ClientSession() as session:
            body = {"order_id": "o-1", "items": [{"sku": "SKU-1", "quantity": 1}]}
            headers = {"Idempotency-Key": "o-1:reserve", "X-Order-Id": "o-1", "X-Step-Id": "s-1"}
            began = time.monotonic()
            async with session.post(
                f"{base}/warehouse/v1/reservations", json=body, headers=headers
            ) as resp:
                await resp.read()
                assert resp.status < 500
            return time.monotonic() - began

    with prefill.Mocks(400) as base:
        assert run(first_call(base)) >= 0.4
