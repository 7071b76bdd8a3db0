"""The route table of the REST API: one line per operation of the API."""

from __future__ import annotations

from aiohttp import web

from orderflow_http.api import console, handlers

ORDER = "/api/v1/orders/{order_id}"


def add_routes(app: web.Application) -> None:
    """Register every operation; HEAD is not offered, so the OpenAPI document is exact."""
    app.add_routes(
        [
            web.post("/api/v1/orders", handlers.create_order),
            web.get("/api/v1/orders", handlers.list_orders, allow_head=False),
            web.get(ORDER, handlers.get_order, allow_head=False),
            web.post(f"{ORDER}/cancel", handlers.cancel),
            web.post(f"{ORDER}/retry", handlers.retry),
            web.post(f"{ORDER}/reconcile", handlers.reconcile),
            web.post(f"{ORDER}/refunds", handlers.request_refund),
            web.get(f"{ORDER}/audit", handlers.audit, allow_head=False),
            web.get("/api/v1/events", handlers.events, allow_head=False),
            web.get("/api/v1/stats/orders", handlers.order_counts, allow_head=False),
            web.get("/api/v1/openapi.json", handlers.openapi, allow_head=False),
            web.get("/healthz", handlers.healthz, allow_head=False),
            web.get("/readyz", handlers.readyz, allow_head=False),
        ]
    )
    console.add_routes(app)
