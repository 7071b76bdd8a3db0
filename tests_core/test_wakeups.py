"""The in-memory side of the wake-up port: it announces nothing, and stops when cancelled."""

from __future__ import annotations

import asyncio
import contextlib

from orderflow_core.ports import WakeUps
from orderflow_core.testing import NoWakeUps


def test_no_wake_ups_never_wakes_and_ends_when_cancelled() -> None:
    woken: list[None] = []

    async def scenario() -> bool:
        wakeups: WakeUps = NoWakeUps()
        listening = asyncio.create_task(wakeups.listen(lambda: woken.append(None)))
        for _ in range(20):
            await asyncio.sleep(0)
        running = not listening.done()
        listening.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listening
        return running and listening.cancelled()

    assert asyncio.run(scenario())
    assert woken == []
