"""The API's access log: one line per request with method, path, status, duration and user.

Never the token: the user is the authenticated principal's id (or `-`), read after the handler
ran; headers and bodies are not logged. The query string is left out (cursors are long and say
nothing an operator needs).
"""

from __future__ import annotations

import contextvars
import logging
import time

from aiohttp import web
from aiohttp.typedefs import Handler

log = logging.getLogger("orderflow.http.access")
# Who the request was authenticated as; the handler runs in the middleware's task, so what it
# notes here is what the middleware reads when the request ends.
_USER: contextvars.ContextVar[str | None] = contextvars.ContextVar("orderflow_user", default=None)


def note_user(user_id: str) -> None:
    """The request in progress is authenticated as `user_id` (for its access-log line)."""
    _USER.set(user_id)


@web.middleware
async def access_log_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Log each answered request at INFO (a redirect or error raised as an HTTP exception too)."""
    started = time.perf_counter()
    reset = _USER.set(None)
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        duration_ms = round((time.perf_counter() - started) * 1000, 2)
        user = _USER.get() or "-"
        _USER.reset(reset)
        log.info(
            "%s %s %d %.2f ms user=%s",
            request.method,
            request.path,
            status,
            duration_ms,
            user,
            extra={
                "method": request.method,
                "path": request.path,
                "status": status,
                "duration_ms": duration_ms,
                "user": user,
            },
        )
