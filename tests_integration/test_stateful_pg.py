"""The core's stateful property test on PostgreSQL: the same machine (random commands, outcomes,
crashes, stalls, clock jumps, two executors), the same six rules after every step, read through
the store port — with `PgOrderStore` underneath instead of the in-memory store.

Each example starts from empty tables (TRUNCATE of this test's own database). The store's pool
is opened and closed on the world's own event loop, since the world drives it with
`loop.run_until_complete`. `ORDERFLOW_PG_STATEFUL_EXAMPLES` sets how many examples run
(default 40, 300 under `HYPOTHESIS_PROFILE=long`).
"""

from __future__ import annotations

import asyncio
import os
from contextlib import AsyncExitStack

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from orderflow_pg import PgOrderStore
from orderflow_testing.recording import RecordingStore
from tests_core.test_stateful import OrderflowMachine
from tests_core.world import World

pytestmark = pytest.mark.postgres

# The `long` profile's deep run: a few hundred examples here (each starts from empty tables).
DEFAULT_EXAMPLES = "300" if os.environ.get("HYPOTHESIS_PROFILE") == "long" else "40"
EXAMPLES = int(os.environ.get("ORDERFLOW_PG_STATEFUL_EXAMPLES", DEFAULT_EXAMPLES))
TABLES = (
    "orders, workflow_steps, step_attempts, refunds, order_history, outbox, "
    "processed_events, audit_log, api_idempotency"
)


def empty_tables(url: str) -> None:
    """Every example starts from a database with the schema and no orders."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")  # fixed names, no input


class PgOrderflowMachine(OrderflowMachine):
    """The core's machine, on a `PgOrderStore` opened on the world's own loop."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._stack = AsyncExitStack()
        super().__init__()

    def make_world(self) -> World:
        empty_tables(self.url)
        loop = asyncio.new_event_loop()
        try:
            store = loop.run_until_complete(
                self._stack.enter_async_context(PgOrderStore.open(self.url, max_size=8))
            )
        except BaseException:
            loop.close()
            raise
        return World(
            executors=2, checkpoint=self._checkpoint, store=RecordingStore(store), loop=loop
        )

    def close_world(self) -> None:
        # The pool first: closing the world cancels every task on the loop, the pool's too.
        try:
            self.world.run(self._stack.aclose())
        finally:
            self.world.close()


def test_the_six_rules_hold_on_postgresql_under_random_crashes_stalls_and_clock_jumps(
    pg_url: str,
) -> None:
    run_state_machine_as_test(
        lambda: PgOrderflowMachine(pg_url),
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
            database=None,
        ),
    )
