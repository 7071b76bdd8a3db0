"""The three simulated services over HTTP: parse → `Simulator.handle` → deliver.

Delivery is where the wire-level failures become real: a `timeout` holds the request and then
closes the connection with no answer; a `lost_response` has already applied the effect and
closes the connection with no answer, so the client sees a dropped connection.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from orderflow_mocks.problems import PROBLEM_JSON, Handler, json_object
from orderflow_mocks.settings import SETTINGS_KEY, SIM_KEY
from orderflow_mocks.simulation import SimResponse

# (method, path, service, operation) of each simulated call (docs/simulated-services.md).
SERVICE_ROUTES: tuple[tuple[str, str, str, str], ...] = (
    ("POST", "/warehouse/v1/reservations", "warehouse", "reserve"),
    ("POST", "/warehouse/v1/releases", "warehouse", "release"),
    ("POST", "/payments/v1/charges", "payments", "charge"),
    ("GET", "/payments/v1/charges/{key}", "payments", "status"),
    ("POST", "/payments/v1/refunds", "payments", "refund"),
    ("POST", "/shipping/v1/shipments", "shipping", "ship"),
    ("POST", "/notifications/v1/messages", "notifications", "notify"),
)


def service_handler(service: str, operation: str) -> Handler:
    """The aiohttp handler of one operation of one simulated service."""

    async def handle(request: web.Request) -> web.StreamResponse:
        body: dict[str, Any] = {} if request.method == "GET" else await json_object(request)
        settings = request.app[SETTINGS_KEY]
        if settings.latency_ms:
            await asyncio.sleep(settings.latency_ms / 1000)
        # Synchronous and atomic: concurrent identical requests see one another's effects.
        response = request.app[SIM_KEY].handle(
            service,
            operation,
            order_id=request.headers.get("X-Order-Id"),
            step_id=request.headers.get("X-Step-Id"),
            idempotency_key=request.headers.get("Idempotency-Key"),
            body=body,
            path_key=request.match_info.get("key"),
        )
        return await deliver(request, response, settings.hold_s)

    handle.__name__ = f"{service}_{operation}"
    return handle


async def deliver(request: web.Request, response: SimResponse, hold_s: float) -> web.StreamResponse:
    """Answer, or hold then drop (`timeout`), or drop at once (`lost_response`)."""
    if response.disposition == "timeout":
        await asyncio.sleep(hold_s)
        return _drop(request)
    if response.disposition == "lost_response":
        return _drop(request)
    headers = {}
    if response.retry_after_s is not None:
        headers["Retry-After"] = format(response.retry_after_s, "g")
    content_type = PROBLEM_JSON if response.status >= 400 else "application/json"
    return web.json_response(
        response.body, status=response.status, headers=headers, content_type=content_type
    )


def _drop(request: web.Request) -> web.StreamResponse:
    """Close the connection with no HTTP answer.

    aiohttp then fails to write the returned placeholder to the closed transport, treats that
    as the client having gone away, and sends nothing.
    """
    transport = request.transport
    if transport is not None:
        transport.close()
    return web.Response(status=204)
