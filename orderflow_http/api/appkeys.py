"""Typed application keys: what the app factory hands to the handlers, without globals."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from orderflow_core.service import OrderService

Readiness = Callable[[], Awaitable[bool]]

SERVICE = web.AppKey("service", OrderService)
READINESS = web.AppKey[Readiness]("readiness")
MAX_BODY = web.AppKey("max_body", int)
BODY_TIMEOUT = web.AppKey("body_timeout_s", float)
OPENAPI = web.AppKey("openapi", bytes)
