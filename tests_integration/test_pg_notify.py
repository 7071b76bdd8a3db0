"""The NOTIFY that wakes idle executors: sent for a step due when it appears, or put back to
pending; not for a timer due later (whose wake-up would only cost an empty claim)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from builders import T0, creation, new_order
from conftest import Run

from orderflow_pg import PgOrderStore

pytestmark = pytest.mark.postgres

CHANNEL = "orderflow_steps"
MARKER = "marker"


def _until_marker(pg_url: str, listener: psycopg.Connection[Any]) -> list[str]:
    """Send a marker, then return every payload received up to it: what the action before
    announced shows before the marker, and an action that announced nothing shows as the
    marker alone (no waiting for something not to happen)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, MARKER))
    payloads = []
    for notice in listener.notifies(timeout=10):
        payloads.append(notice.payload)
        if notice.payload == MARKER:
            return payloads
    raise AssertionError(f"the marker did not arrive within 10 s; got {payloads}")


def test_a_step_due_now_wakes_the_executors_and_a_timer_due_later_does_not(
    pg_store: PgOrderStore, pg_url: str, run: Run[Any]
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")

        run(pg_store.create(creation(new_order(), key=None, due=T0)))
        assert _until_marker(pg_url, listener) == ["", MARKER], "the due step was announced"

        later = T0 + timedelta(minutes=15)
        timer_order = new_order()
        run(pg_store.create(creation(timer_order, key=None, due=later)))
        assert _until_marker(pg_url, listener) == [MARKER], "a step due later is not announced"

        claims = run(pg_store.claim_due(owner="A", now=later, limit=10, lease_s=30))
        [claim] = [c for c in claims if c.order_id == timer_order.order_id]
        with psycopg.connect(pg_url, autocommit=True) as conn:  # as an operator's retry does
            conn.execute(
                "UPDATE workflow_steps SET status = 'pending' WHERE step_id = %s",
                (claim.step_id,),
            )
        assert _until_marker(pg_url, listener) == ["", MARKER], "back to pending is announced"
