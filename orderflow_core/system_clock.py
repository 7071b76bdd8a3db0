"""The production clock: wall time in UTC, asyncio sleep."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime


class SystemClock:
    """`Clock` over the system's time."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))
