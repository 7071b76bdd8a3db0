"""`GET /metrics` and the middleware that counts, times and traces every API request.

Requests are labelled by their route template (`/api/v1/orders/{order_id}`), never the raw path,
so an order id never becomes a label; a path no route matches is `unmatched`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from orderflow_core import observe
from orderflow_core.observe import AttemptObservation
from orderflow_http.telemetry import Telemetry

METRICS = "/metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def route_of(request: web.Request) -> str:
    """The template of the route that matched `request`, or `unmatched`."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@contextmanager
def traced_request(
    telemetry: Telemetry, method: str, route: str, headers: Mapping[str, str]
) -> Iterator[AttemptObservation]:
    """One API request observed (`Telemetry.api_request`), its trace context offered to the
    core meanwhile (`observe.request_trace_parent`), so an order it creates keeps it; tell the
    observation the status."""
    with telemetry.api_request(method, route, headers) as seen:
        token = observe.request_trace_parent.set(telemetry.current_trace_parent())
        try:
            yield seen
        finally:
            observe.request_trace_parent.reset(token)


def telemetry_middleware(telemetry: Telemetry) -> Middleware:
    """Count, time and trace each request (`traced_request`)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        with traced_request(telemetry, request.method, route_of(request), request.headers) as seen:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                seen.finished(str(exc.status))
                raise
            seen.finished(str(response.status))
            return response

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
