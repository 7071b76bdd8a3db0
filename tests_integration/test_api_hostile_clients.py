"""Hostile and broken clients against a real `orderflow api` over raw sockets: each is answered
problem+json (or the connection closed) within its deadline, and nothing lands in the log as an
internal error or a traceback. The limits are set small through ORDERFLOW_HTTP_* variables."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator

import pytest
from conftest import admin_execute, with_database
from processes import CUSTOMER_TOKEN, Proc, base_env, eventually, free_port, http
from psycopg import sql

pytestmark = pytest.mark.postgres

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
KEEPALIVE_S = 2.0
MAX_CONNECTIONS = 64
MAX_HEADERS = 40
MARGIN_S = 5.0  # a loaded CI machine may be slow to close; never fast to close
SECRET = "tok-secret-that-must-not-be-logged-0001"


class Server:
    """One `orderflow api` process, its address, and every line it logged."""

    def __init__(self, proc: Proc, port: int) -> None:
        self.proc = proc
        self.port = port

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def log(self) -> str:
        """The log so far, up to a marker request logged after everything sent before it."""
        ports: list[int] = []

        def marker_answered() -> bool:  # refused at the connection cap, it is tried again
            with self.connect() as sock:
                ports.append(sock.getsockname()[1])
                sock.sendall(b"MARKER / HTTP/1.1\r\nHost: x\r\n\r\n")
                return _read_all(sock).startswith(b"HTTP/1.0 400 ")

        eventually(marker_answered, timeout_s=30, what="the marker request")
        self.proc.wait_for(rf"refused a malformed request from .*, {ports[-1]}\)", timeout_s=30)
        return "\n".join(self.proc.lines)


@pytest.fixture(scope="module")
def server(admin_url: str, session_databases: tuple[str, Iterator[str]]) -> Iterator[Server]:
    yield from _api_server(
        admin_url,
        session_databases,
        ORDERFLOW_HTTP_HEADER_TIMEOUT_S=str(HEADER_TIMEOUT_S),
        ORDERFLOW_HTTP_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
        ORDERFLOW_HTTP_KEEPALIVE_S=str(KEEPALIVE_S),
        ORDERFLOW_HTTP_MAX_CONNECTIONS=str(MAX_CONNECTIONS),
        ORDERFLOW_HTTP_MAX_HEADERS=str(MAX_HEADERS),
        # Idle connections never give way to new ones here (that is tested on its own server):
        # the cap's own 503 is what this module's connection test is about.
        ORDERFLOW_HTTP_PRESSURE_IDLE_S="600",
    )


def _api_server(
    admin_url: str, session_databases: tuple[str, Iterator[str]], **limits: str
) -> Iterator[Server]:
    template, names = session_databases
    name = next(names)
    create = sql.SQL("CREATE DATABASE {} TEMPLATE {}")
    admin_execute(admin_url, create.format(sql.Identifier(name), sql.Identifier(template)))
    port = free_port()
    url = with_database(admin_url, name)
    env = base_env(ORDERFLOW_DATABASE_URL=url, ORDERFLOW_HTTP_PORT=str(port), **limits)
    proc = Proc("api", env)
    try:
        api = proc.wait_for(r"orderflow API: (http://\S+)/api/v1", timeout_s=120).group(1)
        eventually(lambda: http("GET", f"{api}/readyz")[0] == 200, what="/readyz")
        yield Server(proc, port)
    finally:
        proc.terminate()
        proc.close()


def _read_all(sock: socket.socket, timeout_s: float = 30.0) -> bytes:
    """Everything until the server closes the connection (or the deadline passes)."""
    sock.settimeout(timeout_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return data


def _problem(raw: bytes) -> tuple[int, str, dict[str, object]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = dict(line.split(": ", 1) for line in lines[1:])
    content_type = {k.lower(): v for k, v in headers.items()}["content-type"]
    return status, content_type, json.loads(body)


def _assert_clean(log: str) -> None:
    assert "Traceback" not in log
    assert "internal error" not in log
    assert "Error handling request" not in log
    assert SECRET not in log


def _post_head(length: int) -> bytes:
    return (
        "POST /api/v1/orders HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {CUSTOMER_TOKEN}\r\nIdempotency-Key: hostile\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def test_clients_that_disconnect_mid_body_are_no_error(server: Server) -> None:
    for _ in range(100):
        with server.connect() as sock:
            sock.sendall(_post_head(200) + b'{"items": [{"sku"')
    log = server.log()
    _assert_clean(log)
    assert " 500 " not in log
    assert http("GET", f"http://127.0.0.1:{server.port}/healthz")[0] == 200


@pytest.mark.parametrize(
    ("name", "request_bytes"),
    [
        ("request line over 8 KiB", b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("NUL in a header", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n"),
        (
            "too many headers",
            b"GET /healthz HTTP/1.1\r\n"
            + b"".join(b"X-%d: 1\r\n" % i for i in range(MAX_HEADERS + 10))
            + b"\r\n",
        ),
        ("unknown method", b"BREW /healthz HTTP/1.1\r\nHost: x\r\n\r\n"),
        (
            "header line over 8 KiB with a token in it",
            f"GET /healthz HTTP/1.1\r\nX-Token: {SECRET}{'a' * 9000}\r\n\r\n".encode(),
        ),
    ],
)
def test_what_the_http_parser_refuses_is_a_problem_without_a_traceback(
    server: Server, name: str, request_bytes: bytes
) -> None:
    with server.connect() as sock:
        sock.sendall(request_bytes)
        raw = _read_all(sock)
    status, content_type, body = _problem(raw)
    assert (status, body["code"]) == (400, "bad_request"), name
    assert content_type.startswith("application/problem+json")
    assert SECRET not in raw.decode("latin-1")
    _assert_clean(server.log())


def test_headers_that_do_not_arrive_in_time_are_answered_408_and_closed(server: Server) -> None:
    with server.connect() as sock:
        started = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never the blank line
        raw = _read_all(sock)
        elapsed = time.monotonic() - started
    status, content_type, body = _problem(raw)
    assert (status, body["code"]) == (408, "request_timeout")
    assert content_type.startswith("application/problem+json")
    assert HEADER_TIMEOUT_S * 0.9 <= elapsed < HEADER_TIMEOUT_S + MARGIN_S
    _assert_clean(server.log())


def test_headers_sent_a_byte_at_a_time_do_not_extend_the_deadline(server: Server) -> None:
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"z" * 1000
    with server.connect() as sock:
        started = time.monotonic()
        answer = b""
        for byte in head:  # one byte every 50 ms: 50 s for the whole head
            sock.sendall(bytes([byte]))
            if select.select([sock], [], [], 0.05)[0]:
                answer = _read_all(sock)
                break
        elapsed = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:100]
    assert elapsed < HEADER_TIMEOUT_S + MARGIN_S


def test_a_body_that_does_not_arrive_in_time_is_answered_408(server: Server) -> None:
    with server.connect() as sock:
        started = time.monotonic()
        sock.sendall(_post_head(100) + b"{")
        answer = b""
        for _ in range(1000):  # the rest trickles in, a byte every 50 ms
            if select.select([sock], [], [], 0.05)[0]:
                answer = _read_all(sock)
                break
            sock.sendall(b" ")
        elapsed = time.monotonic() - started
    status, _, body = _problem(answer)
    assert (status, body["code"]) == (408, "request_timeout")
    assert b"Connection: close" in answer
    assert BODY_TIMEOUT_S * 0.9 <= elapsed < BODY_TIMEOUT_S + MARGIN_S
    _assert_clean(server.log())


@pytest.mark.parametrize("first_request", [False, True], ids=["silent", "after a request"])
def test_an_idle_connection_is_closed_after_the_keepalive_timeout(
    server: Server, first_request: bool
) -> None:
    with server.connect() as sock:
        started = time.monotonic()
        if first_request:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        raw = _read_all(sock)
        elapsed = time.monotonic() - started
    assert raw.startswith(b"HTTP/1.1 200 ") if first_request else raw == b""
    assert KEEPALIVE_S * 0.9 <= elapsed < KEEPALIVE_S + MARGIN_S


def test_connections_over_the_cap_are_answered_503_and_one_closing_makes_room(
    server: Server,
) -> None:
    held = [server.connect() for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in held:  # every one of them is served
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        with server.connect() as extra:
            status, content_type, body = _problem(_read_all(extra))
        assert (status, body["code"]) == (503, "too_many_connections")
        assert content_type == "application/problem+json"
        held.pop().close()

        def served() -> bool:
            with server.connect() as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                return _read_all(sock).startswith(b"HTTP/1.1 200 ")

        eventually(served, timeout_s=KEEPALIVE_S, what="a free connection slot")
    finally:
        for sock in held:
            sock.close()
    eventually(lambda: http("GET", f"http://127.0.0.1:{server.port}/healthz")[0] == 200)


def test_idle_connections_at_the_cap_give_way_so_a_normal_client_stays_served(
    admin_url: str, session_databases: tuple[str, Iterator[str]]
) -> None:
    """A client holding every connection the server allows and sending nothing (the fault
    campaign's 1,000 idle sockets) locked everyone else out until the keep-alive timeout (15 s).
    At the cap, a connection idle for ORDERFLOW_HTTP_PRESSURE_IDLE_S (1 s) now gives way to a
    new one: a normal client is served long before the idle sockets would time out."""
    servers = _api_server(
        admin_url,
        session_databases,
        ORDERFLOW_HTTP_MAX_CONNECTIONS=str(MAX_CONNECTIONS),
        ORDERFLOW_HTTP_KEEPALIVE_S="30",  # the idle sockets would hold on this long
    )
    server = next(servers)
    try:
        hoarded = [server.connect() for _ in range(MAX_CONNECTIONS)]
        try:
            started = time.monotonic()

            def served() -> bool:
                with server.connect() as sock:
                    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    return _read_all(sock).startswith(b"HTTP/1.1 200 ")

            eventually(served, timeout_s=20, what="a normal client served at the cap")
            waited = time.monotonic() - started
            assert waited < 20, waited  # the keep-alive timeout (30 s) was not what let it in
            for _ in range(10):  # and it stays served, request after request
                assert served()
            closed = sum(1 for sock in hoarded if _closed_by_server(sock))
            assert closed >= 1, "the hoarder lost idle connections, not the normal client"
        finally:
            for sock in hoarded:
                sock.close()
        log = server.log()
        assert "idle for at least 1 s to let new ones in" in log
        _assert_clean(log)
    finally:
        servers.close()


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed `sock` (end of stream waiting), without blocking."""
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
