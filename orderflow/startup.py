"""Start-up checks whose failures a person fixes in the configuration: one line naming the
variable to change, never a traceback and never a password."""

from __future__ import annotations

import errno
import re
import socket

import psycopg
from psycopg.conninfo import conninfo_to_dict

DATABASE_VARIABLE = "ORDERFLOW_DATABASE_URL"
# Long enough for a server across a slow network, short enough that a typo is reported promptly.
CONNECT_TIMEOUT_S = 5


class StartupError(Exception):
    """Start-up cannot go on; the message says which variable to change."""


def describe_database(url: str) -> str:
    """Who connects where, from a database URL, without its password."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "an unreadable connection string"
    host = params.get("host") or params.get("hostaddr") or "the local socket"
    port = params.get("port") or "5432"
    user = params.get("user") or "the default user"
    dbname = params.get("dbname") or "the default database"
    return f"user {user} at {host}:{port}, database {dbname}"


def one_line(message: str, url: str | None) -> str:
    """A driver message on one line, with the URL's password (if any) blotted out."""
    text = "; ".join(part.strip() for part in str(message).splitlines() if part.strip())
    text = re.sub(r"\s+", " ", text)
    password = _password(url)
    if password:
        text = text.replace(password, "***")
    return text


def _password(url: str | None) -> str | None:
    if not url:
        return None
    try:
        password = conninfo_to_dict(url).get("password")
        return str(password) if password else None
    except psycopg.ProgrammingError:
        return None


async def check_database(url: str) -> None:
    """Connect once to the configured database; `StartupError` if that fails."""
    try:
        connection = await psycopg.AsyncConnection.connect(
            url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True
        )
    except psycopg.Error as exc:
        raise database_error(exc, url) from None
    await connection.close()


def database_error(exc: BaseException, url: str) -> StartupError:
    """The one-line start-up error for a database that refused or failed us."""
    reason = one_line(str(exc), url).removeprefix("connection failed: ")
    # libpq repeats the host and port, already named: keep what went wrong.
    reason = _LIBPQ_NOISE.sub("", reason)
    return StartupError(
        f"cannot use the database of {DATABASE_VARIABLE} ({describe_database(url)}): {reason}"
    )


_LIBPQ_NOISE = re.compile(
    r'connection to server at "[^"]*"(?:\s*\([^)]*\))?, port \d+ failed: |FATAL:\s*'
)


def listen_error(exc: OSError, host: str, port: int, port_variable: str) -> StartupError:
    """The one-line start-up error for a port that cannot be listened on."""
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return StartupError(
            f"cannot listen on {where}: the port is in use by another program; "
            f"set {port_variable} to a free port (0 picks one)"
        )
    if exc.errno == errno.EACCES:
        return StartupError(
            f"cannot listen on {where}: ports below 1024 need privileges; "
            f"set {port_variable} to a port above 1023"
        )
    if isinstance(exc, socket.gaierror) or exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
        return StartupError(
            f"cannot listen on {where}: this machine has no such address; check ORDERFLOW_HTTP_HOST"
        )
    return StartupError(f"cannot listen on {where} ({port_variable}): {exc.strerror or exc}")
