"""The app factory of the REST API: everything a handler needs is passed in, nothing is global."""

from __future__ import annotations

from aiohttp import web

from orderflow_core.service import OrderService
from orderflow_http.api import appkeys
from orderflow_http.api.access_log import access_log_middleware
from orderflow_http.api.openapi import document
from orderflow_http.api.parse import BODY_TIMEOUT_S, MAX_BODY
from orderflow_http.api.problems import problem_middleware
from orderflow_http.api.routes import add_routes
from orderflow_http.api.serialize import dumps


async def _always_ready() -> bool:
    return True


def create_app(
    service: OrderService,
    *,
    readiness: appkeys.Readiness | None = None,
    max_body: int = MAX_BODY,
    body_timeout_s: float = BODY_TIMEOUT_S,
) -> web.Application:
    """The REST API over one `OrderService`; `readiness` backs /readyz (default: always ready).

    A body must arrive whole within `body_timeout_s` of its headers (else 408).
    The caller owns the service's resources (pools, sessions) and closes them; the app holds
    none of its own.
    """
    # aiohttp's own limit is a backstop; parse.json_body enforces `max_body` with a 413 problem.
    app = web.Application(
        middlewares=[access_log_middleware, problem_middleware], client_max_size=max_body + 1
    )
    app[appkeys.SERVICE] = service
    app[appkeys.READINESS] = readiness or _always_ready
    app[appkeys.MAX_BODY] = max_body
    app[appkeys.BODY_TIMEOUT] = body_timeout_s
    app[appkeys.OPENAPI] = dumps(document()).encode()
    add_routes(app)
    return app
