"""Waiting in tests without timed sleeps: yield to the loop until a condition holds."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], bool], deadline_s: float = 5.0) -> None:
    """Yield to the loop until `condition` holds; fail after a deadline (no timed sleeps)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not condition():
        assert loop.time() < end, "condition not reached before the deadline"
        await asyncio.sleep(0)
