"""The long-running commands warn, once up, when the server runs without autovacuum: its
statistics never refresh, so the plans each connection caches while the tables are small stay
as the tables grow."""

from __future__ import annotations

import asyncio
import logging

import psycopg
import pytest

from orderflow import runtime
from orderflow_pg import PgOrderStore

pytestmark = pytest.mark.postgres


def test_the_warning_follows_the_servers_autovacuum_setting(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute("SHOW autovacuum").fetchone()
    assert row is not None

    async def check() -> bool:
        async with PgOrderStore.open(pg_url, max_size=1) as store:
            await runtime.warn_if_autovacuum_off(store)
            return await store.autovacuum_on()

    with caplog.at_level(logging.WARNING, logger="orderflow"):
        on = asyncio.run(check())
    assert on == (row[0] == "on")
    warned = [r.getMessage() for r in caplog.records if r.name == "orderflow"]
    assert warned == ([] if on else [runtime.AUTOVACUUM_OFF])
