"""The handlers: parse the request, call one use case of the service, serialise the answer.

Why so thin: roles, visibility, idempotency and every business rule live in the core's
`OrderService`; a handler only translates HTTP to a call and the result back to HTTP.

Check order: the token (401), then the role (403, through `allowed`), then headers, path and
query (400, 404 for an id that names no order), then the body: its media type (415), size (413),
JSON syntax (400) and rules (422). A caller who may not do something learns that first, and
the body of a request that is refused anyway is never read.
"""

from __future__ import annotations

import logging
from uuid import UUID

from aiohttp import web

from orderflow_core.errors import Forbidden, StoreUnavailable
from orderflow_core.model import Principal
from orderflow_core.states import Role
from orderflow_core.validation import check_idempotency_key
from orderflow_http.api import access_log, appkeys, bodies, parse, queue, serialize
from orderflow_http.api.problems import problem_response, redact
from orderflow_http.api.serialize import dumps

log = logging.getLogger("orderflow.http.api")

ORDERS = "/api/v1/orders"
DEFAULT_PAGE = 50
DEFAULT_EVENTS = 100
REPLAYED = {"Idempotent-Replayed": "true"}


def _json(data: object, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(data, status=status, headers=headers, dumps=dumps)


async def caller(request: web.Request) -> Principal:
    """The principal of `Authorization: Bearer <token>`; the scheme is case-insensitive.

    A token that is not visible ASCII cannot be one we issued; it is refused here, before the
    core hashes it (undecodable header bytes arrive as surrogates that cannot be hashed).
    """
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    bearer = token.strip() if scheme.lower() == "bearer" else ""
    if not bearer.isascii() or not bearer.isprintable() or " " in bearer:
        bearer = ""
    principal = await request.app[appkeys.SERVICE].authenticate(bearer or None)
    access_log.note_user(principal.user_id)
    return principal


async def allowed(request: web.Request, operation: str) -> Principal:
    """The caller (401 if none), who must have a role that may ask for `operation` (403)."""
    principal = await caller(request)
    request.app[appkeys.SERVICE].authorize(principal, operation)
    return principal


async def allowed_on_order(request: web.Request, operation: str) -> tuple[Principal, UUID]:
    """The caller (401) and the order the path names, where the caller's role may ask for
    `operation` (403). A customer refused a question about an order that is not theirs gets
    404 instead: customers learn nothing of each other's orders, not even that they exist."""
    principal = await caller(request)
    service = request.app[appkeys.SERVICE]
    try:
        service.authorize(principal, operation)
    except Forbidden:
        if principal.role is Role.CUSTOMER and parse.is_order_id(request):
            await service.authorize_on_order(principal, operation, parse.order_id(request))
        raise
    return principal, parse.order_id(request)


async def _body(request: web.Request) -> object:
    app = request.app
    return await parse.json_body(request, app[appkeys.MAX_BODY], app[appkeys.BODY_TIMEOUT])


async def create_order(request: web.Request) -> web.Response:
    """POST /api/v1/orders → 202 + Location; a replay adds Idempotent-Replayed: true."""
    principal = await allowed(request, "create_order")
    key = check_idempotency_key(parse.idempotency_key(request))
    value = await _body(request)
    items, currency = bodies.create_order(value)
    service = request.app[appkeys.SERVICE]
    view, replayed = await service.create_order(principal, key, items, currency)
    headers = {"Location": f"{ORDERS}/{view.aggregate.order.order_id}"}
    headers.update(REPLAYED if replayed else {})
    return _json(serialize.order(view), 202, headers)


async def get_order(request: web.Request) -> web.Response:
    """GET /api/v1/orders/{order_id}: the full order (owner or operator)."""
    principal = await allowed(request, "get_order")
    view = await request.app[appkeys.SERVICE].get_order(principal, parse.order_id(request))
    return _json(serialize.order(view))


async def list_orders(request: web.Request) -> web.Response:
    """GET /api/v1/orders: newest first, `limit` per page, `cursor` from the previous page."""
    principal = await allowed(request, "list_orders")
    params = parse.query(request, frozenset({"state", "limit", "cursor", "needs_attention"}))
    if parse.needs_attention(params):
        return await queue.waiting_orders(request, principal, params, DEFAULT_PAGE)
    orders, next_cursor = await request.app[appkeys.SERVICE].list_orders(
        principal,
        state=params.get("state"),
        limit=parse.query_int(params, "limit", DEFAULT_PAGE),
        cursor=params.get("cursor"),
    )
    return _json(serialize.order_page(orders, next_cursor))


async def cancel(request: web.Request) -> web.Response:
    """POST …/cancel: 200 when cancelled at once (or already), 202 when a release runs first."""
    principal = await allowed(request, "cancel")
    view, result = await request.app[appkeys.SERVICE].cancel(principal, parse.order_id(request))
    return _json(serialize.order(view), 202 if result == "cancelling" else 200)


async def retry(request: web.Request) -> web.Response:
    """POST …/retry: the current step is re-armed; the executor runs it later (202)."""
    principal = await allowed(request, "retry")
    view = await request.app[appkeys.SERVICE].retry(principal, parse.order_id(request))
    return _json(serialize.order(view), 202)


async def reconcile(request: web.Request) -> web.Response:
    """POST …/reconcile: a status check of the charge is queued (202)."""
    principal, order_id = await allowed_on_order(request, "reconcile")
    view = await request.app[appkeys.SERVICE].reconcile(principal, order_id)
    return _json(serialize.order(view), 202)


async def request_refund(request: web.Request) -> web.Response:
    """POST …/refunds: 202 + the refund; a replay adds Idempotent-Replayed: true."""
    principal, order_id = await allowed_on_order(request, "request_refund")
    key = check_idempotency_key(parse.idempotency_key(request))
    value = await _body(request)
    amount, reason = bodies.refund(value)
    found, replayed = await request.app[appkeys.SERVICE].request_refund(
        principal, order_id, key, amount, reason
    )
    return _json(serialize.refund(found), 202, REPLAYED if replayed else None)


async def audit(request: web.Request) -> web.Response:
    """GET …/audit: the order's audit entries, oldest first (operator)."""
    principal, order_id = await allowed_on_order(request, "audit")
    entries = await request.app[appkeys.SERVICE].audit(principal, order_id)
    return _json(
        {"order_id": str(order_id), "entries": [serialize.audit_entry(e) for e in entries]}
    )


async def events(request: web.Request) -> web.Response:
    """GET /api/v1/events: the outbox feed after `after`, oldest first (operator)."""
    principal = await allowed(request, "events")
    params = parse.query(request, frozenset({"after", "limit"}))
    after = parse.query_int(params, "after", 0)
    limit = parse.query_int(params, "limit", DEFAULT_EVENTS)
    found = await request.app[appkeys.SERVICE].events(principal, after=after, limit=limit)
    return _json(serialize.event_page(found, after))


async def order_counts(request: web.Request) -> web.Response:
    """GET /api/v1/stats/orders: how many orders per state and per waiting reason (operator)."""
    principal = await caller(request)
    # The role is checked (403) before the query string (400), as everywhere.
    found = await request.app[appkeys.SERVICE].order_counts(principal)
    parse.query(request, frozenset())
    return _json(queue.counts(found))


async def healthz(request: web.Request) -> web.Response:
    """GET /healthz: the process answers; nothing else is checked."""
    del request
    return _json({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """GET /readyz: 200 when the readiness check passes, else 503 `not_ready`."""
    try:
        ready = await request.app[appkeys.READINESS]()
    except StoreUnavailable as exc:  # an outage, not a bug: one line, no traceback
        log.warning("not ready: %s", redact(exc.detail))
        ready = False
    except Exception:
        log.exception("readiness check failed")
        ready = False
    if not ready:
        return problem_response(503, "not_ready", "a dependency is not reachable or not current")
    return _json({"status": "ready"})


async def openapi(request: web.Request) -> web.Response:
    """GET /api/v1/openapi.json: the OpenAPI 3.1 document of this API."""
    return web.Response(body=request.app[appkeys.OPENAPI], content_type="application/json")
