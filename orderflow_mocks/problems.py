"""Errors of the mocks as RFC 9457 problem+json, and the strict reading of request bodies."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

log = logging.getLogger("orderflow.mocks")

PROBLEM_JSON = "application/problem+json"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


class ProblemError(Exception):
    """Raised by a handler to answer a problem; the middleware renders it."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail


def problem_response(
    status: int, code: str, detail: str, headers: dict[str, str] | None = None, **extra: Any
) -> web.Response:
    """An RFC 9457 answer with the stable `code`."""
    body = {
        "type": f"urn:orderflow:mocks:{code}",
        "title": code.replace("_", " "),
        "status": status,
        "detail": detail,
        "code": code,
        **extra,
    }
    return web.json_response(body, status=status, headers=headers, content_type=PROBLEM_JSON)


@web.middleware
async def problems_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error leaves as problem+json; nothing answers a bare 500 with a stack trace."""
    try:
        return await handler(request)
    except ProblemError as exc:
        return problem_response(exc.status, exc.code, exc.detail)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, f"http_{exc.status}")
        return problem_response(exc.status, code, exc.reason)
    except Exception:
        error_id = str(uuid.uuid4())
        log.exception("unexpected failure %s in %s %s", error_id, request.method, request.path)
        return problem_response(500, "internal_error", "unexpected failure", error_id=error_id)


async def json_object(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object: 400 `malformed_json`, 422 if not an object."""
    raw = await request.read()
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ProblemError(400, "malformed_json", f"the body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ProblemError(422, "validation_failed", "the body must be a JSON object")
    return body
