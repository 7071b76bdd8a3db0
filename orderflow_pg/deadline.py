"""A deadline that holds even when the database hangs.

`asyncio.timeout` cancels the operation once. psycopg answers that first cancellation of a
running query by sending the server a cancel request and waiting up to 5 s for it, then up to
5 s more for the query to end: against a hung server (or a network that stopped forwarding) a
3 s deadline became 14 s. A second cancellation makes psycopg close the connection at once,
so this deadline cancels again after a short grace: the pool then sees a closed connection,
discards it and opens a fresh one — a connection whose cancel did not come back is never
reused.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

# How long a cancelled operation may take to end cleanly (the server's `QueryCanceled` and a
# rollback, on a healthy server a few milliseconds) before its connection is dropped.
CANCEL_GRACE_S = 0.5


@asynccontextmanager
async def hard_deadline(deadline_s: float, grace_s: float = CANCEL_GRACE_S) -> AsyncIterator[None]:
    """Raise `TimeoutError` in the block after `deadline_s`, `grace_s` later at the latest.

    At the deadline the block is cancelled; if it is still running `grace_s` later it is
    cancelled once more (psycopg then closes the connection instead of waiting for the
    server). A cancellation from outside passes through unchanged.
    """
    task = asyncio.current_task()
    if task is None:  # pragma: no cover - always called from a task
        raise RuntimeError("hard_deadline needs a running task")
    loop = asyncio.get_running_loop()
    outside = task.cancelling()
    fired = 0
    handle: asyncio.TimerHandle | None = None

    def fire() -> None:
        nonlocal fired, handle
        fired += 1
        task.cancel()
        handle = loop.call_later(grace_s, fire) if fired == 1 else None

    handle = loop.call_later(deadline_s, fire)
    try:
        yield
    except asyncio.CancelledError:
        if fired and _uncancel(task, fired) <= outside:
            raise TimeoutError from None
        raise
    except BaseException:
        if fired:
            _uncancel(task, fired)
        raise
    else:
        if fired:
            _uncancel(task, fired)
    finally:
        if handle is not None:
            handle.cancel()


def _uncancel(task: asyncio.Task[object], times: int) -> int:
    remaining = task.cancelling()
    for _ in range(times):
        remaining = task.uncancel()
    return remaining
