"""The Citus harness: one cluster per session (1 coordinator + 2 workers), one distributed
database on it, emptied before each test.

`ORDERFLOW_TEST_CITUS_URL` names a coordinator's database the tests may migrate, distribute
and empty; without it a local cluster is started under /tmp (free ports, nodes as user
`postgres` when root) when Citus is installed in PostgreSQL 15, and stopped at the session's
end; clusters of earlier sessions whose process is gone are removed first. Elsewhere the
tests that need one skip, saying why.

Why one database emptied per test rather than one database per test: a Citus database is
made on every node (CREATE DATABASE is not carried to the workers), then each table is
distributed into its shards, seconds per database; TRUNCATE of the distributed tables takes a
fraction of that. (A template copy does not work: Citus's maintenance daemon stays connected
to each database, and CREATE DATABASE refuses a template in use.)
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from contextlib import AsyncExitStack
from typing import Any

import psycopg
import pytest

from orderflow_pg import PgOrderStore
from orderflow_pg import local_citus as citus
from orderflow_pg.distribute import distribute

URL_VARIABLE = "ORDERFLOW_TEST_CITUS_URL"
# Few shards: two per worker is enough to show every statement stays on one of them.
TEST_SHARDS = 4
TABLES = (
    "orders, workflow_steps, finished_attempts, refunds, outbox, audit_log, processed_events,"
    " api_idempotency, users, outbox_feed"
)


# The local cluster this session started (none with ORDERFLOW_TEST_CITUS_URL): fault tests
# restart its nodes.
LOCAL: list[citus.Cluster] = []


@pytest.fixture(scope="session")
def citus_database() -> Iterator[str]:
    """A migrated, distributed database on a Citus cluster (its coordinator's URL)."""
    configured = os.environ.get(URL_VARIABLE)
    if configured:
        asyncio.run(distribute(configured, shard_count=TEST_SHARDS))
        yield configured
        return
    missing = citus.citus_missing()
    if missing is not None:
        pytest.skip(f"no Citus cluster: {URL_VARIABLE} is unset and {missing}")
    with citus.running(workers=2) as cluster:
        LOCAL.append(cluster)
        url = cluster.create_database("orderflow_citus")
        asyncio.run(distribute(url, shard_count=TEST_SHARDS))
        yield url


@pytest.fixture
def citus_url(citus_database: str) -> str:
    """The session's distributed database, emptied (the feed position back at 0)."""
    with psycopg.connect(citus_database, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {TABLES} RESTART IDENTITY")  # the schema's tables (constant)
        conn.execute("INSERT INTO outbox_feed (published_through) VALUES (0)")
    return citus_database


@pytest.fixture
def citus_store(citus_url: str, run: Any) -> Iterator[PgOrderStore]:
    """A PgOrderStore on the emptied distributed database (it finds it is distributed)."""
    stack = AsyncExitStack()
    store = run(stack.enter_async_context(PgOrderStore.open(citus_url, max_size=8)))
    try:
        assert store.distributed
        yield store
    finally:
        run(stack.aclose())
