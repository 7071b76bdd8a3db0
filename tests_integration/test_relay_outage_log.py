"""While PostgreSQL is unreachable the relay's loop says so once (no traceback per poll), and
once more when it works again. The database is cut off by a TCP proxy that refuses and drops
connections, not by stopping the shared server."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from tcp_proxy import PausableProxy

from orderflow.runtime import _every
from orderflow_core import SystemClock
from orderflow_core.relay import OutboxRelay
from orderflow_pg import PgOrderStore

pytestmark = pytest.mark.postgres


def test_a_database_outage_is_logged_once_and_its_end_once(
    pg_url: str, run: Any, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = PausableProxy.to_database(pg_url)

    async def scenario() -> tuple[int, int]:
        url = proxy.url(pg_url)
        outcomes: list[bool] = []
        changed = asyncio.Event()  # set after every poll
        async with PgOrderStore.open(url, min_size=1, max_size=2, statement_timeout_s=0.5) as store:
            relay = OutboxRelay(store, SystemClock())

            async def polled() -> None:
                try:
                    await relay.run_once()
                except Exception:
                    outcomes.append(False)
                    changed.set()
                    raise
                outcomes.append(True)
                changed.set()

            async def until(check: Any) -> None:
                async with asyncio.timeout(30):
                    while not check():
                        changed.clear()
                        await changed.wait()

            stop = asyncio.Event()
            loop = asyncio.create_task(_every(0.05, polled, stop, "outbox relay"))
            await until(lambda: outcomes.count(True) >= 2)
            proxy.cut(refuse=True)
            mark = len(outcomes)
            await until(lambda: outcomes[mark:].count(False) >= 4)
            failed = outcomes[mark:].count(False)
            proxy.mend()
            await until(lambda: outcomes[-3:] == [True] * 3)
            stop.set()
            await loop
            return failed, outcomes.count(False)

    with caplog.at_level(logging.INFO, logger="orderflow"), proxy:
        failed, total = run(scenario())
    assert failed >= 4
    assert total >= failed
    relay_lines = [r for r in caplog.records if r.getMessage().startswith("outbox relay")]
    warnings = [r for r in relay_lines if r.levelno == logging.WARNING]
    recoveries = [r for r in relay_lines if r.levelno == logging.INFO]
    assert len(warnings) == 1, [r.getMessage() for r in relay_lines]
    assert not warnings[0].exc_info, "a database outage is no bug: no traceback"
    assert "\n" not in warnings[0].getMessage(), "one line"
    assert len(recoveries) == 1
    assert f"after {total} failed attempts" in recoveries[0].getMessage()
    assert not any(r.exc_info for r in caplog.records if r.name.startswith("orderflow"))
