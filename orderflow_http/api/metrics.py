"""`GET /metrics` and the middleware that counts, times and traces every API request.

Requests are labelled by their route template (`/api/v1/orders/{order_id}`), never the raw path,
so an order id never becomes a label; a path no route matches is `unmatched`.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from orderflow_core import observe
from orderflow_http.telemetry import Telemetry

METRICS = "/metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def route_of(request: web.Request) -> str:
    """The template of the route that matched `request`, or `unmatched`."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def telemetry_middleware(telemetry: Telemetry) -> Middleware:
    """Count, time and trace each request; a traced request's context is offered to the core
    (`observe.request_trace_parent`), so an order it creates keeps it."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        with telemetry.api_request(request.method, route_of(request), request.headers) as seen:
            token = observe.request_trace_parent.set(telemetry.current_trace_parent())
            try:
                response = await handler(request)
                seen.finished(str(response.status))
                return response
            except web.HTTPException as exc:
                seen.finished(str(exc.status))
                raise
            finally:
                observe.request_trace_parent.reset(token)

    return middleware


def add_metrics_route(app: web.Application, telemetry: Telemetry) -> None:
    """Serve the Prometheus text format at /metrics (when metrics are enabled)."""

    async def metrics(request: web.Request) -> web.Response:
        del request
        return web.Response(
            body=await telemetry.exposition(), headers={"Content-Type": CONTENT_TYPE}
        )

    if telemetry.serves_metrics:
        app.router.add_get(METRICS, metrics, allow_head=False)


def metrics_app(telemetry: Telemetry) -> web.Application:
    """A worker's own little server: only /metrics."""
    app = web.Application()
    add_metrics_route(app, telemetry)
    return app
