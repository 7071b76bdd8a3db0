"""What /metrics reads from the database when scraped: two small indexed queries.

The oldest unpublished outbox event is the first row after the feed position; orders
waiting for a person are counted through the attention queue's partial index, so both cost
what is waiting, never the size of the tables.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from orderflow_core.observe import ProbeReading
from orderflow_core.ports import Clock
from orderflow_pg.store import PgOrderStore

OLDEST_UNPUBLISHED = """
SELECT created_at FROM outbox WHERE seq > (SELECT published_through FROM outbox_feed)
ORDER BY seq LIMIT 1
"""
WAITING_BY_REASON = """
SELECT attention_reason, count(*) FROM orders
WHERE attention_reason IS NOT NULL
GROUP BY attention_reason
"""


class PgProbe:
    """`Telemetry`'s probe on PostgreSQL; ages are measured against the injected clock."""

    def __init__(self, store: PgOrderStore, clock: Clock) -> None:
        self._db = store._db
        self._clock = clock

    async def __call__(self) -> ProbeReading:
        async with self._db.connection("metrics_probe") as conn:
            oldest = await (await conn.execute(OLDEST_UNPUBLISHED)).fetchone()
            waiting = await (await conn.execute(WAITING_BY_REASON)).fetchall()
        age = 0.0
        if oldest is not None:
            created: datetime = oldest[0]
            age = max((self._clock.now() - created).total_seconds(), 0.0)
        return ProbeReading(age, {str(reason): int(count) for reason, count in waiting})

    def pool_stats(self) -> dict[str, Any]:
        """The pool's counters (`pool_size`, `pool_available`, `pool_max`, ...)."""
        return dict(self._db.pool.get_stats())
