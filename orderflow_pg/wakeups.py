"""`PgWakeUps`: the `WakeUps` port on PostgreSQL's LISTEN/NOTIFY.

The store's `apply_changes` sends `NOTIFY orderflow_steps` when a committed change makes a step
due now (once per statement); a listening connection turns each notification into a wake-up of
the executor. A lost connection is logged and re-opened; the executor polls meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import psycopg
from psycopg import sql

from orderflow_pg.database import with_keepalives

log = logging.getLogger("orderflow")

STEPS_CHANNEL = "orderflow_steps"
RECONNECT_S = 1.0
# Against a hung server, give up and retry instead of waiting psycopg's default two minutes.
CONNECT_TIMEOUT_S = 10


class PgWakeUps:
    """Wake-ups from `LISTEN orderflow_steps` on a connection of its own (not from the pool)."""

    def __init__(self, url: str, *, reconnect_s: float = RECONNECT_S) -> None:
        self._url = url
        self._reconnect_s = reconnect_s

    async def listen(self, wake: Callable[[], None]) -> None:
        """Call `wake` on every NOTIFY of a new due step until cancelled; reconnect on failure."""
        while True:
            try:
                # Keepalives: a LISTEN connection only reads, so without them a primary that
                # vanished (no RST) would leave it waiting for hours instead of reconnecting.
                connect = psycopg.AsyncConnection.connect(
                    with_keepalives(self._url),
                    autocommit=True,
                    connect_timeout=CONNECT_TIMEOUT_S,
                )
                async with await connect as conn:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(STEPS_CHANNEL)))
                    async for _ in conn.notifies():
                        wake()
            except (psycopg.Error, OSError) as exc:
                log.warning("LISTEN connection lost (%s); polling meanwhile", exc)
                await asyncio.sleep(self._reconnect_s)
