"""Strict reading of what a client sends: media type, body size, JSON syntax, path ids, queries.

Why strict: a body the server half-understands is how a float becomes kopecks or an unknown
field is silently dropped; anything not exactly as documented is refused before the core sees it.
The shapes of the two request bodies (create an order, request a refund) live in `bodies`.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from orderflow_core import deadlines
from orderflow_core.errors import InvalidParameter, NotFound, OrderflowError

MAX_BODY = 64 * 1024
# How long a client may take to send a whole body once its headers arrived.
BODY_TIMEOUT_S = 15.0
# Longer integer literals are out of every range we accept; refusing them early keeps
# Python's int-from-text cost (and its 4300-digit limit) away from request parsing.
MAX_INT_DIGITS = 30
# Query integers: seq numbers fit a PostgreSQL bigint.
MAX_QUERY_INT = 2**63 - 1
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_DIGITS = re.compile(r"^[0-9]{1,19}$")


class UnsupportedMediaType(OrderflowError):
    """The body is not `application/json`."""

    code = "unsupported_media_type"


class PayloadTooLarge(OrderflowError):
    """The body is over the limit (64 KiB by default)."""

    code = "payload_too_large"


class RequestTimeout(OrderflowError):
    """The body did not arrive in time (a slow or stalled client)."""

    code = "request_timeout"


class ClientGone(Exception):
    """The client closed the connection before its whole body arrived: nobody to answer."""


class MalformedJson(OrderflowError):
    """The body is not one well-formed JSON text in UTF-8."""

    code = "malformed_json"


class OversizedInt:
    """An integer literal too long to be in any accepted range; type checks reject it."""

    def __init__(self, text: str) -> None:
        self.text = text


def _parse_int(text: str) -> int | OversizedInt:
    digits = text.lstrip("-")
    return OversizedInt(text) if len(digits) > MAX_INT_DIGITS else int(text)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _check_media_type(request: web.Request) -> None:
    if request.content_type != "application/json":
        raise UnsupportedMediaType("the body must be sent as Content-Type: application/json")
    charset = request.charset
    if charset is not None and charset.lower() not in ("utf-8", "utf8"):
        raise UnsupportedMediaType("a JSON body must be UTF-8")


async def _read_limited(request: web.Request, max_body: int, timeout_s: float) -> bytes:
    """The body, refusing it as soon as it passes `max_body` bytes, whatever was declared,
    or when it has not all arrived within `timeout_s`."""
    declared = request.content_length
    if declared is not None and declared > max_body:
        raise PayloadTooLarge(f"the body may be at most {max_body} bytes")
    body = bytearray()
    try:
        # The request's deadline (`deadline_middleware`) bounds the work done for it; a slow
        # body has its own deadline here and does not eat into it.
        with deadlines.paused():
            async with asyncio.timeout(timeout_s):
                while chunk := await request.content.read(max_body + 1 - len(body)):
                    body.extend(chunk)
                    if len(body) > max_body:
                        raise PayloadTooLarge(f"the body may be at most {max_body} bytes")
    except TimeoutError:
        raise RequestTimeout(f"the whole body must arrive within {timeout_s:g} s") from None
    except (ConnectionError, RequestPayloadError) as exc:
        raise ClientGone(str(exc)) from None
    return bytes(body)


def decode_json(raw: bytes) -> object:
    """One JSON text in UTF-8; no NaN/Infinity, no duplicate keys, long integers flagged."""
    try:
        text = raw.decode("utf-8")
        return json.loads(
            text,
            parse_int=_parse_int,
            parse_constant=_reject_constant,
            object_pairs_hook=_unique_keys,
        )
    except RecursionError:
        raise MalformedJson("the JSON is nested too deeply") from None
    except UnicodeDecodeError:
        raise MalformedJson("the body is not valid UTF-8") from None
    except ValueError as exc:
        raise MalformedJson(f"the body is not valid JSON: {exc}") from None


async def json_body(
    request: web.Request, max_body: int, timeout_s: float = BODY_TIMEOUT_S
) -> object:
    """The request's JSON value after the media-type, size and syntax checks."""
    _check_media_type(request)
    return decode_json(await _read_limited(request, max_body, timeout_s))


def is_order_id(request: web.Request) -> bool:
    """Whether the `{order_id}` path segment is a canonical UUID."""
    return bool(_UUID.match(request.match_info["order_id"]))


def order_id(request: web.Request) -> UUID:
    """The `{order_id}` path segment; anything but a canonical UUID names no order (404)."""
    text = request.match_info["order_id"]
    if not _UUID.match(text):
        raise NotFound("no order has this id")
    return UUID(text)


def idempotency_key(request: web.Request) -> str | None:
    """The Idempotency-Key header as sent; the core checks its format. Sent twice is invalid."""
    values = request.headers.getall("Idempotency-Key", [])
    if len(values) > 1:
        return ""  # the core refuses an empty key as invalid, which a repeated header is
    return values[0] if values else None


def query(request: web.Request, allowed: frozenset[str]) -> Mapping[str, str]:
    """The query parameters, each at most once, none unknown, none empty."""
    params = request.query
    for name in params:
        if name not in allowed:
            raise InvalidParameter(f"unknown query parameter {name!r}")
        if len(params.getall(name)) > 1:
            raise InvalidParameter(f"query parameter {name!r} given more than once")
        if params[name] == "":
            raise InvalidParameter(f"query parameter {name!r} is empty")
    return {name: params[name] for name in params}


def query_int(params: Mapping[str, str], name: str, default: int) -> int:
    """A non-negative decimal integer parameter; its range is the core's to check."""
    text = params.get(name)
    if text is None:
        return default
    if not _DIGITS.match(text) or int(text) > MAX_QUERY_INT:
        raise InvalidParameter(f"{name} must be a non-negative decimal integer")
    return int(text)


def needs_attention(params: Mapping[str, str]) -> bool:
    """The attention-queue filter: `needs_attention=true` lists the orders waiting for a
    person. Only `true` is accepted: `false` could be read as "orders not waiting", which the
    list does not offer, so it is refused rather than silently ignored."""
    text = params.get("needs_attention")
    if text is None:
        return False
    if text != "true":
        raise InvalidParameter("needs_attention takes only the value true")
    return True
