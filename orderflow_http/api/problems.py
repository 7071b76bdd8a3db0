"""Every error of the REST API as `application/problem+json` (RFC 9457), in one middleware.

Why one place: handlers raise the core's errors (or aiohttp's HTTP exceptions for routing) and
never build error bodies, so every error has the same shape and a stable `code`, and nothing that
escapes a handler can reach a client as a stack trace.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from orderflow_core.errors import OrderflowError
from orderflow_http.api.parse import ClientGone
from orderflow_http.api.serialize import dumps

log = logging.getLogger("orderflow.http.api")

PROBLEM_TYPE = "application/problem+json"

# Titles are the same for every occurrence of a code (RFC 9457 §3.1.3); details vary.
TITLES: Mapping[str, str] = {
    "unauthenticated": "Authentication required",
    "forbidden": "Not allowed for this role",
    "not_found": "Not found",
    "method_not_allowed": "Method not allowed",
    "invalid_transition": "Not allowed in the order's current state",
    "not_retryable": "Nothing retryable",
    "idempotency_key_required": "Idempotency-Key header required",
    "invalid_idempotency_key": "Invalid Idempotency-Key header",
    "idempotency_key_reused": "Idempotency-Key reused with another request",
    "idempotency_conflict": "Concurrent request with the same Idempotency-Key",
    "concurrent_update": "Concurrent update",
    "validation_failed": "Validation failed",
    "invalid_parameter": "Invalid query parameter",
    "malformed_json": "Malformed JSON",
    "unsupported_media_type": "Unsupported media type",
    "payload_too_large": "Payload too large",
    "request_timeout": "Request not received in time",
    "bad_request": "Bad request",
    "too_many_connections": "Too many connections",
    "store_unavailable": "Storage unavailable",
    "not_ready": "Not ready",
    "internal_error": "Internal error",
}

# What a client is told when the store did not answer: what it can act on. The store's own
# words (which operation, which driver exception) go to the log, never to the client.
UNAVAILABLE_DETAIL = (
    "the service could not reach its database in time; try again after Retry-After seconds "
    "(a request sent with an Idempotency-Key is safe to repeat with the same key)"
)
# A password in a URL (scheme://user:secret@) or a libpq `password=` pair.
_SECRETS = re.compile(r"(?P<keep>://[^:/@\s]*:)[^@\s]*@|(?P<pair>password\s*=\s*)\S+", re.I)


def redact(text: str) -> str:
    """`text` without the passwords a connection string or URL in it might carry."""
    return _SECRETS.sub(
        lambda m: f"{m['keep']}***@" if m["keep"] else f"{m['pair']}***", text
    )


# The HTTP status of each error code the API answers with; the core's errors carry only their
# code. A code not listed (a bug's, or an adapter's own error) is a 500.
STATUSES: Mapping[str, int] = {
    "invalid_transition": 409,
    "not_retryable": 409,
    "not_found": 404,
    "forbidden": 403,
    "unauthenticated": 401,
    "idempotency_key_reused": 422,
    "validation_failed": 422,
    "idempotency_conflict": 409,
    "store_unavailable": 503,
    "idempotency_key_required": 400,
    "invalid_idempotency_key": 400,
    "invalid_parameter": 400,
    "concurrent_update": 409,
    "unsupported_media_type": 415,
    "payload_too_large": 413,
    "request_timeout": 408,
    "malformed_json": 400,
    "cursor_expired": 410,  # retention removed the events after the cursor (docs/retention.md)
}


def status_of(exc: OrderflowError) -> int:
    """The HTTP status the API answers an error of the core (or of its own parsing) with."""
    return STATUSES.get(exc.code, 500)


# aiohttp's own HTTP exceptions (unknown route, wrong method, its body limit) by status.
HTTP_CODES: Mapping[int, str] = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def problem_type(code: str) -> str:
    """A URN per code: stable, and it does not pretend to be a page that resolves."""
    return f"urn:orderflow:problem:{code}"


def problem_body(
    status: int, code: str, detail: str, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The RFC 9457 object of one error."""
    title = TITLES.get(code) or HTTPStatus(status).phrase
    body: dict[str, Any] = {
        "type": problem_type(code),
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
    }
    body.update(extra or {})
    return body


def problem_response(
    status: int,
    code: str,
    detail: str,
    extra: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    """The problem+json answer for one error."""
    body = problem_body(status, code, detail, extra)
    all_headers = dict(headers or {})
    if status == 401:
        all_headers["WWW-Authenticate"] = 'Bearer realm="orderflow"'
    if status == 503:
        all_headers.setdefault("Retry-After", "1")
    return web.json_response(
        body, status=status, headers=all_headers, content_type=PROBLEM_TYPE, dumps=dumps
    )


def _from_http_exception(exc: web.HTTPException) -> web.Response:
    code = HTTP_CODES.get(exc.status, "bad_request" if exc.status < 500 else "internal_error")
    headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
    detail = HTTPStatus(exc.status).description or exc.reason
    return problem_response(exc.status, code, detail, headers=headers)


def _internal_error(request: web.Request) -> web.Response:
    error_id = uuid.uuid4().hex
    log.exception("internal error %s on %s %s", error_id, request.method, request.path)
    return problem_response(
        500,
        "internal_error",
        f"an unexpected error happened; quote error id {error_id} when reporting it",
        {"error_id": error_id},
    )


def _unavailable(request: web.Request, exc: OrderflowError) -> web.Response:
    # One line, no traceback: an outage is expected operation, not a bug in this process.
    log.warning(
        "%s %s answered 503 %s: %s", request.method, request.path, exc.code, redact(exc.detail)
    )
    return problem_response(503, exc.code, UNAVAILABLE_DETAIL)


@web.middleware
async def problem_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Translate whatever a handler raises into problem+json; unknown failures into a 500."""
    try:
        return await handler(request)
    except asyncio.CancelledError:
        raise
    except ClientGone as exc:
        # Not an error of ours, and nobody is left to read an answer: one quiet line.
        log.debug("%s %s: the client went away mid-body (%s)", request.method, request.path, exc)
        return problem_response(400, "bad_request", "the connection closed mid-body")
    except OrderflowError as exc:
        status = status_of(exc)
        if status == 503:
            return _unavailable(request, exc)
        if status >= 500:
            return _internal_error(request)
        response = problem_response(status, exc.code, exc.detail, exc.extra)
        if status == 408:
            response.force_close()  # the rest of a body that came too slowly is not awaited
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _from_http_exception(exc)
    except Exception:
        return _internal_error(request)
