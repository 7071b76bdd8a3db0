"""The HTTP server around the app, hardened against slow, broken and hostile clients.

Why not `web.TCPSite` alone: aiohttp's defaults keep an idle connection an hour, wait for a
request's headers as long as the client likes, accept any number of connections, and answer
what its own parser refuses in text/plain with a traceback in the log. Here every connection
has deadlines (headers, body, idle keep-alive), their number is capped, and the parser's
refusals are problem+json answers logged in one line. Each limit is a `ServerLimits` field.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMethod, HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse

from orderflow_http.api.parse import BODY_TIMEOUT_S
from orderflow_http.api.problems import PROBLEM_TYPE, problem_body, problem_response

log = logging.getLogger("orderflow.http.server")

REASONS = {408: "Request Timeout", 503: "Service Unavailable"}


@attrs.frozen
class ServerLimits:
    """What one API process grants its clients; the defaults suit a service behind no proxy."""

    # From the first byte of a request until its last header line.
    header_timeout_s: float = 10.0
    # From the headers until the last byte of the body (answered 408 when exceeded).
    body_timeout_s: float = BODY_TIMEOUT_S
    # How long an idle keep-alive connection (or one that never sends a byte) stays open.
    keepalive_s: float = 15.0
    # Open connections at once. At the cap a new connection takes the place of the one idle
    # longest (waiting for a request, no byte of it received) if that one has been idle at
    # least `pressure_idle_s`; with none such, it is answered 503 and closed.
    max_connections: int = 1000
    # The request line and each header line, in bytes.
    max_line_bytes: int = 8190
    # Header lines per request.
    max_headers: int = 100
    # The idle timeout under pressure: at the connection cap, an idle connection is closed for
    # a new one after this long instead of `keepalive_s` (1,000 sockets that never send a byte
    # no longer lock every other client out until they time out).
    pressure_idle_s: float = 1.0


@attrs.define
class _Gate:
    """Open connections of one server, and whether the cap was hit since it was last below.

    `connections` holds the open ones in the order they last received a byte (the longest
    quiet first), where the cap looks for an idle one to close."""

    open: int = 0
    saturated: bool = False
    connections: OrderedDict[_Connection, None] = attrs.Factory(OrderedDict)
    evicted: int = 0


def raw_problem(
    status: int, code: str, detail: str, headers: dict[str, str] | None = None
) -> bytes:
    """A whole HTTP/1.1 problem+json answer that closes the connection, for the moments when
    there is no request object to answer (before or instead of a parsed request)."""
    body = json.dumps(problem_body(status, code, detail)).encode()
    lines = [
        f"HTTP/1.1 {status} {REASONS[status]}",
        f"Content-Type: {PROBLEM_TYPE}",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in (headers or {}).items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class _Connection(RequestHandler):
    """aiohttp's connection protocol with a header deadline, the connection cap, and quiet
    problem+json answers to what its parser refuses."""

    def __init__(
        self,
        manager: web.Server,
        gate: _Gate,
        limits: ServerLimits,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__(
            manager,
            loop=loop,
            keepalive_timeout=limits.keepalive_s,
            max_line_size=limits.max_line_bytes,
            max_field_size=limits.max_line_bytes,
            max_headers=limits.max_headers,
            # An unread body (a request refused before its body) is drained this long at most.
            lingering_time=limits.body_timeout_s,
            access_log=None,  # type: ignore[arg-type]  # None turns access logging off
        )
        self._gate = gate
        self._limits = limits
        self._refused = False
        self._counted = False
        self._head_timer: asyncio.TimerHandle | None = None

    # -- the connection cap --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        gate = self._gate
        if gate.open >= self._limits.max_connections and not self._evict_idle():
            self._refused = True
            if not gate.saturated:
                gate.saturated = True
                log.warning(
                    "%d connections open: refusing more until one closes"
                    " (ORDERFLOW_HTTP_MAX_CONNECTIONS)",
                    gate.open,
                )
            detail = "the server has as many connections open as it allows; retry shortly"
            answer = raw_problem(503, "too_many_connections", detail, {"Retry-After": "1"})
            transport.write(answer)  # type: ignore[attr-defined]  # a TCP transport
            transport.close()
            return
        gate.open += 1
        if gate.saturated and gate.open < self._limits.max_connections:
            gate.saturated = False
        self._counted = True
        gate.connections[self] = None
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_head_timer()
        self._uncount()
        if not self._refused:
            super().connection_lost(exc)

    def _uncount(self) -> None:
        if self._counted:
            self._counted = False
            self._gate.open -= 1
            self._gate.connections.pop(self, None)

    def _idle_for(self, now: float) -> float | None:
        """How long this connection has waited for a request with nothing of it received;
        None when it is busy (a request under way, or part of one received)."""
        if self.transport is None or self._head_timer is not None or not self._waiting_for_head():
            return None
        # aiohttp moves the keep-alive deadline on when a connection opens and after each
        # answer: the idle time began one keep-alive timeout before it.
        return now - (self._next_keepalive_close_time - self._limits.keepalive_s)

    def _evict_idle(self) -> bool:
        """At the cap: close the connection quiet the longest if it has been idle at least
        `pressure_idle_s`, making room for a new one. Whether one was closed."""
        now = self._loop.time()
        for conn in self._gate.connections:
            idle = conn._idle_for(now)
            if idle is not None and idle >= self._limits.pressure_idle_s:
                break
        else:
            return False
        gate = self._gate
        gate.evicted += 1
        if gate.evicted == 1 or gate.evicted % 1000 == 0:
            log.warning(
                "%d connections open: closed %d idle for at least %g s to let new ones in"
                " (ORDERFLOW_HTTP_MAX_CONNECTIONS, ORDERFLOW_HTTP_PRESSURE_IDLE_S)",
                gate.open,
                gate.evicted,
                self._limits.pressure_idle_s,
            )
        conn._uncount()
        conn.force_close()
        return True

    # -- the header deadline -------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._counted:
            self._gate.connections.move_to_end(self)
        heads = self._request_count
        super().data_received(data)
        if self._request_count != heads:
            self._stop_head_timer()
        elif self._head_timer is None and data and self._waiting_for_head():
            self._head_timer = self._loop.call_later(
                self._limits.header_timeout_s, self._head_timed_out
            )

    def _waiting_for_head(self) -> bool:
        """Whether the connection waits for a request whose head has not fully arrived (not
        mid-body, not draining an unread body: then the body deadline applies)."""
        if self._messages:
            return False
        if self._request_count == 0:  # the first request (its loop may not be waiting yet)
            return True
        waiter = self._waiter
        return waiter is not None and not waiter.done()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        transport = self.transport
        if transport is None or not self._waiting_for_head():
            return
        log.info(
            "closed a connection from %s: request headers not complete within %g s",
            self.peername,
            self._limits.header_timeout_s,
        )
        detail = f"the request headers must arrive within {self._limits.header_timeout_s:g} s"
        transport.write(raw_problem(408, "request_timeout", detail))
        self.force_close()

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    # -- what aiohttp's parser refuses ---------------------------------------------------------
    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> StreamResponse:
        if not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        if request.writer.output_size > 0:
            raise ConnectionError("an answer was already sent; closing")
        detail = self._parser_detail(exc)
        # The class and our own words only: the parser's message quotes the client's bytes,
        # which may hold a token.
        log.info("refused a malformed request from %s: %s", self.peername, type(exc).__name__)
        response = problem_response(400, "bad_request", detail)
        response.force_close()
        return response

    def _parser_detail(self, exc: HttpProcessingError) -> str:
        if isinstance(exc, LineTooLong):
            return (
                f"the request line and each header line may be at most {self.max_line_size} bytes"
            )
        if isinstance(exc, BadHttpMethod):
            return "the request method is not a valid HTTP method"
        if "Too many headers" in str(exc):
            return f"a request may have at most {self.max_headers} header lines"
        return "the request is not valid HTTP/1.1 (a malformed request line or header)"


@asynccontextmanager
async def serving(
    app: web.Application, host: str, port: int, limits: ServerLimits | None = None
) -> AsyncIterator[tuple[str, int]]:
    """Serve `app` on host:port (0: a free port) under `limits`; yields the bound address.

    On exit the listening socket closes first, then open connections get the app's graceful
    shutdown (requests in progress finish).
    """
    limits = limits or ServerLimits()
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    loop = asyncio.get_running_loop()
    manager = runner.server
    assert manager is not None  # set up above
    gate = _Gate()

    def connection() -> _Connection:
        return _Connection(manager, gate, limits, loop)

    try:
        server = await loop.create_server(connection, host, port, reuse_address=True)
    except BaseException:
        await runner.cleanup()
        raise
    try:
        address: Any = server.sockets[0].getsockname()
        yield str(address[0]), int(address[1])
    finally:
        server.close()
        await runner.cleanup()
