"""Outbound aiohttp clients of the warehouse, payments and shipping services.

Why: this is where a real integration plugs in. Each service gets its own `ClientSession` with
its own connection limit, a bulkhead, the call deadline, and one classification: what was
answered goes through `orderflow_core.classify`; what was not answered is transient if the
request never left (connection refused, reset before sending, local busy) and an unknown
outcome once it may have reached the service (timeout, connection dropped after sending).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import SimpleNamespace, TracebackType
from typing import Any, Self
from urllib.parse import quote

import aiohttp
import orjson
from yarl import URL

from orderflow_core.classify import classify
from orderflow_core.model import Item
from orderflow_core.outcomes import Broken, Outcome, Transient, UnknownOutcome, outcome_name
from orderflow_core.ports import CallContext
from orderflow_http.bulkhead import Bulkhead, BulkheadBusyError
from orderflow_http.telemetry import Telemetry

DEFAULT_TIMEOUT_S = 3.0
DEFAULT_CONNECTION_LIMIT = 20


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` header (delta-seconds or an HTTP date), else None."""
    if value is None or not value.strip():
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)


class _Progress:
    """Whether the request's headers left this process (set by an aiohttp trace hook)."""

    def __init__(self) -> None:
        self.sent = False


async def _on_headers_sent(
    session: aiohttp.ClientSession, context: SimpleNamespace, params: object
) -> None:
    del session, params
    progress = context.trace_request_ctx
    if isinstance(progress, _Progress):
        progress.sent = True


def _json_text(body: object) -> str:
    """Request bodies with orjson (aiohttp's default is the standard library's json)."""
    return orjson.dumps(body).decode()


def _decode(raw: bytes) -> object:
    try:
        return orjson.loads(raw)
    except ValueError:  # orjson.JSONDecodeError is one
        return None


def _lost(operation: str, exc: BaseException, progress: _Progress) -> Outcome:
    """A call that got no answer: unknown once the request may have reached the service."""
    detail = f"{operation}: {type(exc).__name__}: {exc}".rstrip(": ")
    if isinstance(exc, aiohttp.InvalidURL):
        return Broken(detail=detail)
    if isinstance(exc, aiohttp.ClientConnectorError) or not progress.sent:
        return Transient(detail=f"{detail} (not sent)")
    return UnknownOutcome(detail=detail)


class HttpService:
    """One external service: its session, connection limit, bulkhead and deadline.

    Use as an async context manager, or call `close()`; the session opens on first use. With
    `telemetry`, each call is counted, timed and traced, and carries a W3C `traceparent`.
    """

    SERVICE = "service"  # the name in metrics and spans

    def __init__(
        self,
        base_url: str,
        *,
        bulkhead: Bulkhead | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        connection_limit: int = DEFAULT_CONNECTION_LIMIT,
        telemetry: Telemetry | None = None,
    ) -> None:
        if timeout_s <= 0 or connection_limit < 1:
            raise ValueError("timeout_s must be positive and connection_limit at least 1")
        self.base_url = base_url.rstrip("/")
        self.bulkhead = bulkhead or Bulkhead(connection_limit, "queue")
        self.timeout_s = timeout_s
        self.connection_limit = connection_limit
        self._session: aiohttp.ClientSession | None = None
        self.telemetry = telemetry
        if telemetry is not None:
            telemetry.watch_bulkhead(self.SERVICE, self.bulkhead)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the session and its connections (idempotent)."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            trace = aiohttp.TraceConfig()
            trace.on_request_headers_sent.append(_on_headers_sent)
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.connection_limit),
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                trace_configs=[trace],
                json_serialize=_json_text,
            )
        return self._session

    async def _call(
        self,
        operation: str,
        call: CallContext,
        path: str,
        body: dict[str, Any] | None = None,
    ) -> Outcome:
        """One physical call inside a bulkhead slot, classified."""
        if self.telemetry is None:
            return await self._admitted(operation, call, path, body)
        with self.telemetry.external_call(self.SERVICE, operation, call) as observed:
            outcome = await self._admitted(operation, call, path, body)
            observed.finished(outcome_name(outcome))
            return outcome

    async def _admitted(
        self, operation: str, call: CallContext, path: str, body: dict[str, Any] | None
    ) -> Outcome:
        try:
            async with self.bulkhead.slot():
                return await self._send(operation, call, path, body)
        except BulkheadBusyError:
            if self.telemetry is not None:
                self.telemetry.bulkhead_rejected(self.SERVICE)
            return Transient(detail="busy", local=True)

    async def _send(
        self, operation: str, call: CallContext, path: str, body: dict[str, Any] | None
    ) -> Outcome:
        headers = {
            "Idempotency-Key": call.idempotency_key,
            "X-Order-Id": str(call.order_id),
            "X-Step-Id": str(call.step_id),
        }
        if self.telemetry is not None:
            self.telemetry.inject(headers)
        method = "GET" if body is None else "POST"
        url = URL(self.base_url + path, encoded=True)
        progress = _Progress()
        session = self._open()
        try:
            async with session.request(
                method,
                url,
                json=body,
                headers=headers,
                trace_request_ctx=progress,
                allow_redirects=False,  # no service answers with a redirect: broken
            ) as response:
                raw = await response.read()
                status = response.status
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
        except (aiohttp.ClientError, OSError) as exc:  # TimeoutError is an OSError
            return _lost(operation, exc, progress)
        return classify(operation, status, _decode(raw), retry_after)


def _items(items: Sequence[Item]) -> list[dict[str, Any]]:
    return [
        {"sku": i.sku, "quantity": i.quantity, "unit_price_minor": i.unit_price_minor}
        for i in items
    ]


class HttpWarehouse(HttpService):
    """`Warehouse` over HTTP: `POST /warehouse/v1/reservations`, `/releases`."""

    SERVICE = "warehouse"

    async def reserve(self, call: CallContext, items: Sequence[Item]) -> Outcome:
        body = {"order_id": str(call.order_id), "items": _items(items)}
        return await self._call("reserve", call, "/warehouse/v1/reservations", body)

    async def release(self, call: CallContext, reservation_key: str) -> Outcome:
        body = {"order_id": str(call.order_id), "reservation_key": reservation_key}
        return await self._call("release", call, "/warehouse/v1/releases", body)


class HttpPayments(HttpService):
    """`Payments` over HTTP: charges, the status of a charge by its key, refunds."""

    SERVICE = "payments"

    async def charge(self, call: CallContext, amount_minor: int, currency: str) -> Outcome:
        body = {"order_id": str(call.order_id), "amount_minor": amount_minor, "currency": currency}
        return await self._call("charge", call, "/payments/v1/charges", body)

    async def charge_status(self, call: CallContext, charge_key: str) -> Outcome:
        path = f"/payments/v1/charges/{quote(charge_key, safe='')}"
        return await self._call("status", call, path)

    async def refund(self, call: CallContext, payment_reference: str, amount_minor: int) -> Outcome:
        body = {
            "order_id": str(call.order_id),
            "payment_reference": payment_reference,
            "amount_minor": amount_minor,
        }
        return await self._call("refund", call, "/payments/v1/refunds", body)


class HttpShipping(HttpService):
    """`Shipping` over HTTP: `POST /shipping/v1/shipments`."""

    SERVICE = "shipping"

    async def ship(self, call: CallContext, items: Sequence[Item]) -> Outcome:
        body = {"order_id": str(call.order_id), "items": _items(items)}
        return await self._call("ship", call, "/shipping/v1/shipments", body)


class HttpNotifications(HttpService):
    """`Notifications` over HTTP: `POST /notifications/v1/messages`."""

    SERVICE = "notifications"

    async def notify(self, call: CallContext, template: str) -> Outcome:
        body = {"order_id": str(call.order_id), "template": template}
        return await self._call("notify", call, "/notifications/v1/messages", body)
