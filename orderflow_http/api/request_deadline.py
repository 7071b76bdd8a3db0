"""The request deadline: one bound on everything a request waits for, not one per statement.

`deadline_middleware` gives each request a `Deadline` (`orderflow_core.deadlines`): every store
operation the request makes gets what is left of it (the PostgreSQL adapter cuts its own
per-operation deadline to that), so a request that makes four database round trips waits no
longer than one that makes one. A wait the store cannot cut (a create queued behind a shared
writer) is cut here: `CUT_GRACE_S` after the deadline the handler is cancelled. Either way the
client gets `503 store_unavailable` with `Retry-After` (problem+json). Time spent receiving the
body does not count; it has its own deadline (408).
"""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from orderflow_core import deadlines
from orderflow_core.errors import StoreUnavailable

# The default request deadline: the statement timeout each store operation had alone.
REQUEST_DEADLINE_S = 3.0
# After the deadline, how long a store operation may take to give up cleanly (its cancelled
# statement and, for a hung connection, the adapter's cancel grace) before the handler is cut.
CUT_GRACE_S = 0.75


def deadline_middleware(seconds: float = REQUEST_DEADLINE_S) -> Middleware:
    """A middleware that bounds each request by `seconds` (plus `CUT_GRACE_S` at worst)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        cut = asyncio.timeout(None)
        try:
            async with cut:

                def follow(at: float | None) -> None:
                    cut.reschedule(None if at is None else at + CUT_GRACE_S)

                deadline = deadlines.Deadline(seconds, follow)
                follow(deadline.at)
                with deadlines.running_under(deadline):
                    return await handler(request)
        except TimeoutError:
            if not cut.expired():
                raise
            raise StoreUnavailable(
                f"{request.method} {request.path}: no answer within the request deadline of"
                f" {seconds:g} s"
            ) from None

    return middleware
