"""The core's stateful property test on PostgreSQL: the same machine (random commands, outcomes,
crashes, stalls, clock jumps, two executors), the same six rules after every step, read through
the store port — with `PgOrderStore` underneath instead of the in-memory store.

Each example starts from empty tables (TRUNCATE of this test's own database); the kit opens and
closes the store's pool on the example's own event loop. `ORDERFLOW_PG_STATEFUL_EXAMPLES` sets
how many examples run (default 40, 300 under `HYPOTHESIS_PROFILE=long`).
"""

from __future__ import annotations

import gc
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from orderflow_core.process import NEWEST
from orderflow_pg import PgOrderStore
from orderflow_testing import OrderflowMachine, machine_for
from tests_core import fraud_check
from tests_core.test_stateful_regressions import EXPIRY_BESIDE_AN_UNSTARTED_CHARGE, replay

pytestmark = pytest.mark.postgres

# The `long` profile's deep run: a few hundred examples here (each starts from empty tables).
DEFAULT_EXAMPLES = "300" if os.environ.get("HYPOTHESIS_PROFILE") == "long" else "40"
EXAMPLES = int(os.environ.get("ORDERFLOW_PG_STATEFUL_EXAMPLES", DEFAULT_EXAMPLES))
TABLES = (
    "orders, workflow_steps, finished_attempts, refunds, outbox, "
    "processed_events, audit_log, api_idempotency"
)


def empty_tables(url: str) -> None:
    """Every example starts from a database with the schema and no orders."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")  # fixed names, no input


def pg_machine(
    url: str, process_version: int = NEWEST, *, optimisations: bool = True
) -> type[OrderflowMachine]:
    """The kit's machine on a `PgOrderStore`, from empty tables in every example."""

    @asynccontextmanager
    async def fresh_store() -> AsyncIterator[PgOrderStore]:
        empty_tables(url)
        async with PgOrderStore.open(url, max_size=8, optimisations=optimisations) as store:
            yield store

    return machine_for(
        fresh_store, name="PgOrderflowMachine", process_version=process_version
    )


def test_the_six_rules_hold_on_postgresql_under_random_crashes_stalls_and_clock_jumps(
    pg_url: str,
) -> None:
    # Finalizers of objects earlier tests left to the collector would otherwise run whenever a
    # collection happens, possibly inside Hypothesis's `ast.parse` of this machine's source,
    # where CPython 3.11 reports "AST constructor recursion depth mismatch" (seen once in CI).
    gc.collect()
    run_state_machine_as_test(
        pg_machine(pg_url),
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
            database=None,
        ),
    )


def test_the_six_rules_hold_on_postgresql_without_the_store_optimisations(pg_url: str) -> None:
    """The same machine on the store's plain path (`ORDERFLOW_STORE_OPTIMISATIONS=0`): each
    create, start and result a transaction of its own, no kept copies; fewer examples."""
    gc.collect()
    run_state_machine_as_test(
        pg_machine(pg_url, optimisations=False),
        settings=settings(
            max_examples=max(EXAMPLES // 4, 5),
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
            database=None,
        ),
    )


def test_the_expiry_beside_an_unstarted_charge_releases_on_postgresql(pg_url: str) -> None:
    """The version-3 sequence the in-memory machine found (the timer and a charge leased by one
    claim, the charge's start not yet run), replayed on PostgreSQL, where the claim and its
    starts take the store's own route."""
    with fraud_check.registered():
        replay(pg_machine(pg_url, fraud_check.VERSION)(), EXPIRY_BESIDE_AN_UNSTARTED_CHARGE)


# On a Citus cluster every write is several single-shard parts driven by the coordinator:
# fewer examples keep the run to a few minutes (ORDERFLOW_CITUS_STATEFUL_EXAMPLES for more).
CITUS_EXAMPLES = int(os.environ.get("ORDERFLOW_CITUS_STATEFUL_EXAMPLES", "8"))


@pytest.mark.citus
def test_the_six_rules_hold_on_a_citus_cluster_under_random_crashes_stalls_and_clock_jumps(
    citus_url: str,
) -> None:
    gc.collect()
    run_state_machine_as_test(
        pg_machine(citus_url),
        settings=settings(
            max_examples=CITUS_EXAMPLES,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
            database=None,
        ),
    )
