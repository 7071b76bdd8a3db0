"""After a long database outage the service follows the database back within about a second.

psycopg_pool retries a failed connection with a back-off that doubles from 1 s without a cap:
after an outage of 20 s the service came back ~8.7 s after the database did (503 all along).
Here a TCP proxy in front of the real PostgreSQL refuses every connection for longer than
that back-off needs to grow past a few seconds, while the store is asked all along, as under
load; once the proxy forwards again the store must answer within `RECOVERY_S`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Run
from tcp_proxy import PausableProxy

from orderflow_pg import PgOrderStore

pytestmark = pytest.mark.postgres
# Long enough that the uncapped back-off (1, 2, 4, 8 s ...) waits 8 s between attempts.
OUTAGE_S = 12.0
# What "within about a second" allows: the capped back-off (0.5 s), a connection, a loaded
# machine. The bug this guards against came back after up to 8 s.
RECOVERY_S = 2.0
# How often the store is asked during the outage (load, not a wait for a condition).
ASK_EVERY_S = 0.2


@pytest.fixture
def proxy(pg_url: str) -> Iterator[PausableProxy]:
    with PausableProxy.to_database(pg_url) as running:
        yield running


def test_the_store_follows_the_database_back_within_a_second_after_a_long_outage(
    proxy: PausableProxy, pg_url: str, run: Run[Any]
) -> None:
    async def scenario() -> tuple[int, float]:
        async with PgOrderStore.open(proxy.url(pg_url), min_size=2, max_size=4) as store:
            assert await store.ping()
            proxy.cut(refuse=True)  # every connection closed, every new one dropped
            failed = 0
            outage_ends = time.monotonic() + OUTAGE_S
            while time.monotonic() < outage_ends:
                failed += not await store.ping()
                await asyncio.sleep(ASK_EVERY_S)
            proxy.mend()
            back = time.monotonic()
            while not await store.ping():
                assert time.monotonic() - back < 30, "the store never came back"
            return failed, time.monotonic() - back

    failed, recovered_after = run(scenario())
    assert failed >= 3, "the outage was seen"
    assert recovered_after < RECOVERY_S, recovered_after
