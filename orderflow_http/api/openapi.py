"""The OpenAPI 3.1 document of the REST API, built as data and served at /api/v1/openapi.json.

Why a Python dict: the enums (states, step kinds) come from the core, so the document cannot
drift from the code, and the tests use the very same document to validate and to fuzz.
"""

from __future__ import annotations

from typing import Any

from orderflow_http.api.openapi_schemas import (
    IDEMPOTENCY_KEY,
    ORDER_ID,
    REPLAYED_HEADER,
    STATES,
    Schema,
    param,
    ref,
    schemas,
)

Operation = dict[str, Any]

PROBLEM = "application/problem+json"
BEARER: list[dict[str, list[str]]] = [{"bearer": []}]
ORDER = "/api/v1/orders/{order_id}"
# The connection cap's 503 comes before any request is read, so any operation may see it.
STORE_DOWN = ("store_unavailable", "too_many_connections")


def _content(schema: Schema, media: str = "application/json") -> dict[str, Any]:
    return {media: {"schema": schema}}


def _problem(description: str, *codes: str) -> dict[str, Any]:
    """An error response whose body is a Problem with one of `codes`."""
    schema = {"allOf": [ref("Problem")], "properties": {"code": {"enum": list(codes)}}}
    return {"description": description, "content": _content(schema, PROBLEM)}


def _ok(description: str, schema_name: str, headers: dict[str, Any] | None = None) -> Any:
    response: dict[str, Any] = {"description": description, "content": _content(ref(schema_name))}
    if headers:
        response["headers"] = headers
    return response


def _errors(
    *statuses: int, bad_request: tuple[str, ...] = (), conflict: tuple[str, ...] = ()
) -> Any:
    """The error responses an operation can give, besides 401/500/503 which all of /api/v1 can."""
    catalogue = {
        400: _problem("bad request", *bad_request),
        403: _problem("the caller's role may not do this", "forbidden"),
        404: _problem("no such order, or another customer's", "not_found"),
        408: _problem("the body did not arrive within the body timeout", "request_timeout"),
        409: _problem("not allowed now", *conflict, "concurrent_update"),
        413: _problem("body over 64 KiB", "payload_too_large"),
        415: _problem("body not application/json", "unsupported_media_type"),
        422: _problem(
            "the body breaks an input rule, or the key was used with another body",
            "validation_failed",
            "idempotency_key_reused",
        ),
    }
    responses = {str(s): catalogue[s] for s in statuses}
    responses["401"] = _problem("missing or unknown bearer token", "unauthenticated")
    responses["500"] = _problem("unexpected failure; error_id is in the log", "internal_error")
    responses["503"] = _problem(
        "the store is unreachable, or the server is at its connection cap; retry later",
        *STORE_DOWN,
    )
    return responses


BODY_ERRORS = (400, 403, 404, 408, 409, 413, 415, 422)
KEY_ERRORS = ("malformed_json", "idempotency_key_required", "invalid_idempotency_key")


def _create_order() -> Operation:
    location = {"Location": {"schema": {"type": "string"}, "description": "the order's URL"}}
    return {
        "operationId": "createOrder",
        "summary": "Create an order (customer); idempotent per user and Idempotency-Key",
        "security": BEARER,
        "parameters": [IDEMPOTENCY_KEY],
        "requestBody": {"required": True, "content": _content(ref("CreateOrderRequest"))},
        "responses": {
            "202": _ok("accepted; the saga runs", "Order", {**location, **REPLAYED_HEADER}),
            **_errors(
                400,
                403,
                408,
                409,
                413,
                415,
                422,
                bad_request=KEY_ERRORS,
                conflict=("idempotency_conflict",),
            ),
        },
    }


def _list_orders() -> Operation:
    return {
        "operationId": "listOrders",
        "summary": "List orders newest first (or the attention queue): customers their own, "
        "operators all",
        "security": BEARER,
        "parameters": [
            param(
                "state",
                "query",
                {"type": "string", "enum": STATES},
                "only this state",
                required=False,
            ),
            param(
                "limit",
                "query",
                {"type": "integer", "minimum": 1, "maximum": 100, "default": 50},
                "page size",
                required=False,
            ),
            param(
                "cursor",
                "query",
                {"type": "string", "minLength": 1},
                "next_cursor of the previous page",
                required=False,
            ),
            param(
                "needs_attention",
                "query",
                {"type": "string", "enum": ["true"]},
                "`true`: the attention queue — only orders waiting for a person, newest "
                "waiting first (by `attention_since`); its cursors belong to that order",
                required=False,
            ),
        ],
        "responses": {
            "200": _ok("a page of orders", "OrderPage"),
            **_errors(400, bad_request=("invalid_parameter",)),
        },
    }


def _get_order() -> Operation:
    return {
        "operationId": "getOrder",
        "summary": "An order with history, current step, steps, reservation, payment, refunds",
        "security": BEARER,
        "parameters": [ORDER_ID],
        "responses": {"200": _ok("the order", "Order"), **_errors(404)},
    }


def _command(op_id: str, summary: str, ok: dict[str, Any], *errors: int, conflict: str) -> Any:
    return {
        "operationId": op_id,
        "summary": summary,
        "security": BEARER,
        "parameters": [ORDER_ID],
        "responses": {**ok, **_errors(*errors, conflict=(conflict,))},
    }


def _commands() -> dict[str, Operation]:
    cancel = _command(
        "cancelOrder",
        "Cancel (owner): 200 when cancelled at once or already, 202 when a release runs first",
        {
            "200": _ok("cancelled (or already)", "Order"),
            "202": _ok("cancelling: the reservation is being released", "Order"),
        },
        403,
        404,
        409,
        conflict="invalid_transition",
    )
    retry = _command(
        "retryOrder",
        "Re-arm the current failed step (owner); blocked steps, shipping_failed and a stopped "
        "notification: operator",
        {"202": _ok("re-armed with the same key", "Order")},
        404,
        409,
        conflict="not_retryable",
    )
    reconcile = _command(
        "reconcileOrder",
        "Queue a status check of the charge (operator, payment_unknown only)",
        {"202": _ok("status check queued", "Order")},
        403,
        404,
        409,
        conflict="invalid_transition",
    )
    return {"cancel": cancel, "retry": retry, "reconcile": reconcile}


def _refund() -> Operation:
    return {
        "operationId": "requestRefund",
        "summary": "Refund a confirmed charge after shipped/shipping_failed (operator)",
        "security": BEARER,
        "parameters": [ORDER_ID, IDEMPOTENCY_KEY],
        "requestBody": {"required": True, "content": _content(ref("RefundRequest"))},
        "responses": {
            "202": _ok("the refund was requested", "Refund", REPLAYED_HEADER),
            **_errors(
                *BODY_ERRORS,
                bad_request=KEY_ERRORS,
                conflict=("invalid_transition", "idempotency_conflict"),
            ),
        },
    }


def _audit_and_events() -> dict[str, Operation]:
    audit = {
        "operationId": "orderAudit",
        "summary": "The order's audit entries, oldest first (operator)",
        "security": BEARER,
        "parameters": [ORDER_ID],
        "responses": {"200": _ok("the audit log", "AuditLog"), **_errors(403, 404)},
    }
    events = {
        "operationId": "listEvents",
        "summary": "The outbox feed after `after`, oldest first (operator)",
        "security": BEARER,
        "parameters": [
            param(
                "after",
                "query",
                {"type": "integer", "minimum": 0, "default": 0},
                "the last seq already seen (0: from the oldest event kept)",
                required=False,
            ),
            param(
                "limit",
                "query",
                {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                "page size",
                required=False,
            ),
        ],
        "responses": {
            "200": _ok("events", "EventPage"),
            **_errors(400, 403, bad_request=("invalid_parameter",)),
            "410": _problem(
                "the events after `after` are no longer kept (retention); `oldest_after` says"
                " where the kept feed starts",
                "cursor_expired",
            ),
        },
    }
    return {"audit": audit, "events": events}


def _order_counts() -> Operation:
    return {
        "operationId": "orderCounts",
        "summary": "How many orders are in each state and wait for each reason (operator)",
        "security": BEARER,
        "responses": {
            "200": _ok("the counts; every state and reason is listed, zeros included", "Counts"),
            **_errors(400, 403, bad_request=("invalid_parameter",)),
        },
    }


def _pages() -> dict[str, Operation]:
    """The operator console and the readable API reference: static pages, no data in them."""

    def page(
        op_id: str, summary: str, parameters: list[Any] | None = None, media: str = "text/html"
    ) -> Operation:
        text = {"description": "a static file of the package"}
        content = {kind: {"schema": text} for kind in media.split()}
        op: Operation = {
            "operationId": op_id,
            "summary": summary,
            "security": [],
            "responses": {
                "200": {"description": "the file", "content": content},
                "404": _problem("no such file", "not_found"),
            },
        }
        if parameters:
            op["parameters"] = parameters
        return op

    asset = param(
        "asset",
        "path",
        {"type": "string", "pattern": "^[a-z]+\\.(js|css)$"},
        "a script or style sheet of the console",
        required=True,
    )
    home = page("home", "Redirects (302) to the operator console")
    home["responses"] = {"302": {"description": "to /console"}}
    return {
        "home": home,
        "console": page("console", "The operator console (sign in with an operator token)"),
        "asset": page(
            "consoleAsset",
            "A script or style sheet of the console",
            [asset],
            "text/javascript text/css",
        ),
        "docs": page("apiDocs", "This document, rendered readably (served locally)"),
    }


def _public() -> dict[str, Operation]:
    def plain(op_id: str, summary: str, responses: dict[str, Any]) -> Operation:
        return {"operationId": op_id, "summary": summary, "security": [], "responses": responses}

    doc = {"description": "this document", "content": _content({"type": "object"})}
    return {
        "openapi": plain("openapi", "This OpenAPI 3.1 document", {"200": doc}),
        "healthz": plain("healthz", "Liveness", {"200": _ok("alive", "Status")}),
        "readyz": plain(
            "readyz",
            "Readiness: the database is reachable and migrated",
            {"200": _ok("ready", "Status"), "503": _problem("not ready", "not_ready")},
        ),
    }


def paths() -> dict[str, dict[str, Operation]]:
    """Every path and method the app routes."""
    commands, feeds, public, pages = _commands(), _audit_and_events(), _public(), _pages()
    return {
        "/api/v1/orders": {"post": _create_order(), "get": _list_orders()},
        ORDER: {"get": _get_order()},
        f"{ORDER}/cancel": {"post": commands["cancel"]},
        f"{ORDER}/retry": {"post": commands["retry"]},
        f"{ORDER}/reconcile": {"post": commands["reconcile"]},
        f"{ORDER}/refunds": {"post": _refund()},
        f"{ORDER}/audit": {"get": feeds["audit"]},
        "/api/v1/events": {"get": feeds["events"]},
        "/api/v1/stats/orders": {"get": _order_counts()},
        "/api/v1/openapi.json": {"get": public["openapi"]},
        "/healthz": {"get": public["healthz"]},
        "/readyz": {"get": public["readyz"]},
        "/": {"get": pages["home"]},
        "/console": {"get": pages["console"]},
        "/console/{asset}": {"get": pages["asset"]},
        "/api/v1/docs": {"get": pages["docs"]},
    }


def webhooks() -> dict[str, Any]:
    """What the webhook (and the event feed) carries that a consumer acts on."""
    return {
        "orderNeedsAttention": {
            "post": {
                "operationId": "orderNeedsAttention",
                "summary": "An order started waiting for a person (or now waits for another "
                "reason); committed with the change that made it wait",
                "requestBody": {"required": True, "content": _content(ref("AttentionEvent"))},
                "responses": {"200": {"description": "any 2xx acknowledges the event"}},
            }
        }
    }


def document() -> dict[str, Any]:
    """The whole OpenAPI 3.1 document."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "orderflow",
            "version": "1.0.0",
            "description": "Durable order processing: reserve stock, charge, ship. Errors are "
            "application/problem+json (RFC 9457) with a stable `code`.",
        },
        "servers": [{"url": "/"}],
        "security": BEARER,
        "paths": paths(),
        "webhooks": webhooks(),
        "components": {
            "schemas": schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
