"""The app factory of the REST API: everything a handler needs is passed in, nothing is global."""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Middleware

from orderflow_core.service import OrderService
from orderflow_http.api import appkeys
from orderflow_http.api.access_log import access_log_middleware
from orderflow_http.api.metrics import add_metrics_route, telemetry_middleware
from orderflow_http.api.openapi import document
from orderflow_http.api.parse import BODY_TIMEOUT_S, MAX_BODY
from orderflow_http.api.problems import problem_middleware
from orderflow_http.api.request_deadline import REQUEST_DEADLINE_S, deadline_middleware
from orderflow_http.api.routes import add_routes
from orderflow_http.api.serialize import dumps
from orderflow_http.telemetry import Telemetry


async def _always_ready() -> bool:
    return True


def create_app(
    service: OrderService,
    *,
    readiness: appkeys.Readiness | None = None,
    max_body: int = MAX_BODY,
    body_timeout_s: float = BODY_TIMEOUT_S,
    telemetry: Telemetry | None = None,
    request_deadline_s: float = REQUEST_DEADLINE_S,
) -> web.Application:
    """The REST API over one `OrderService`; `readiness` backs /readyz (default: always ready).

    A body must arrive whole within `body_timeout_s` of its headers (else 408). Everything
    else a request waits for (its store operations together) is bounded by
    `request_deadline_s` (else 503 with Retry-After).
    The caller owns the service's resources (pools, sessions) and closes them; the app holds
    none of its own. With `telemetry`, every request is counted, timed and traced, and its
    metrics are served at /metrics.
    """
    # aiohttp's own limit is a backstop; parse.json_body enforces `max_body` with a 413 problem.
    middlewares: list[Middleware] = [
        access_log_middleware,
        problem_middleware,
        deadline_middleware(request_deadline_s),
    ]
    if telemetry is not None:
        middlewares.insert(0, telemetry_middleware(telemetry))
    app = web.Application(middlewares=middlewares, client_max_size=max_body + 1)
    app[appkeys.SERVICE] = service
    app[appkeys.READINESS] = readiness or _always_ready
    app[appkeys.MAX_BODY] = max_body
    app[appkeys.BODY_TIMEOUT] = body_timeout_s
    app[appkeys.OPENAPI] = dumps(document()).encode()
    add_routes(app)
    if telemetry is not None:
        add_metrics_route(app, telemetry)
    return app
