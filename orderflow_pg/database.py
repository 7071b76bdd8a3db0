"""A connection pool with the deadline every store operation runs under."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import psycopg
from psycopg import AsyncConnection
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool
from psycopg_pool.base import AttemptWithBackoff

from orderflow_core.errors import StoreUnavailable
from orderflow_pg.errors import database_edge

# The server cancels a statement first; the client gives up a little later, so the server's
# clean `QueryCanceled` normally wins and the client deadline only catches a hung server or
# network. The client deadline covers the whole operation (waiting for a connection and
# every statement); a connection that does not answer its cancellation within
# `CANCEL_GRACE_S` is dropped, so an operation ends by statement_timeout + 0.75 s.
CLIENT_MARGIN_S = 0.25
# The server function that refuses a prepared statement whose result columns changed (its
# error's message may be translated; the routine's name is not).
STALE_PLAN_CHECK = "RevalidateCachedQuery"
# Behind a transaction pooler the time zone cannot travel in the startup options.
SET_UTC = "SET TimeZone TO 'UTC'"
# After a connection attempt fails, the pool tries again after RECONNECT_FIRST_S, doubling up to
# RECONNECT_MAX_S (psycopg_pool's own back-off doubles without a cap, from 1 s: after an outage
# of 20 s its next attempt came up to 16 s after the database was back). A refused attempt
# costs the server nothing, so the service follows the database back within RECONNECT_MAX_S.
RECONNECT_FIRST_S = 0.1
RECONNECT_MAX_S = 0.5
# TCP keepalives and a user timeout on every connection (unless the URL sets its own): a
# connection to a primary that vanished (host down, network partition; no RST ever comes) is
# found dead within about TCP_KEEPALIVE_IDLE_S + TCP_KEEPALIVE_INTERVAL_S * TCP_KEEPALIVE_COUNT
# when idle, and within TCP_USER_TIMEOUT_MS when data sent to it stays unacknowledged; the
# LISTEN connection and pooled idle connections would otherwise wait for minutes (the kernel's
# default keepalive starts after two hours).
TCP_KEEPALIVES = {
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}


def with_keepalives(url: str) -> str:
    """`url` with the `TCP_KEEPALIVES` parameters it does not set itself (its own win)."""
    try:
        given = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return url  # refused when connecting, with the driver's own message
    missing = {k: v for k, v in TCP_KEEPALIVES.items() if k not in given}
    return make_conninfo(url, **missing) if missing else url


def session_options(statement_timeout_s: float) -> str:
    """The startup `options` of a direct connection: statement and idle-in-transaction
    timeouts, UTC."""
    return (
        f"-c statement_timeout={round(statement_timeout_s * 1000)}"
        f" -c idle_in_transaction_session_timeout={round(2 * statement_timeout_s * 1000)}"
        " -c TimeZone=UTC"
    )


class _CappedBackoff(AttemptWithBackoff):
    """psycopg_pool's reconnect back-off, from `RECONNECT_FIRST_S`, capped at `RECONNECT_MAX_S`."""

    INITIAL_DELAY = RECONNECT_FIRST_S

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, RECONNECT_MAX_S)


class _Pool(AsyncConnectionPool[Any]):
    """The pool, reconnecting with `_CappedBackoff` (psycopg_pool has no setting for it)."""

    async def _add_connection(
        self, attempt: AttemptWithBackoff | None, growing: bool = False
    ) -> None:
        if attempt is None:
            attempt = _CappedBackoff(timeout=self.reconnect_timeout)
        await super()._add_connection(attempt, growing=growing)


class Database:
    """The pool the store and the user directory share; hands out connections at the edge."""

    def __init__(self, pool: AsyncConnectionPool[Any], *, statement_timeout_s: float) -> None:
        self.pool = pool
        self.statement_timeout_s = statement_timeout_s
        self.deadline_s = statement_timeout_s + CLIENT_MARGIN_S

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        url: str,
        *,
        min_size: int,
        max_size: int,
        statement_timeout_s: float,
        connect_timeout_s: float,
        transaction_pooler: bool = False,
    ) -> AsyncIterator[Database]:
        """Open a pool whose connections carry `statement_timeout` and UTC; close it after.

        A session idle inside a transaction for twice the statement timeout (its process frozen
        or cut off mid-transaction) is ended by the server: its row locks go, and so does its
        hold on the outbox feed's horizon (`orderflow_pg.feed`).

        With `transaction_pooler` (pgbouncer in transaction mode between here and the server)
        nothing is kept in a server session: no server-side prepared statements (a statement
        prepared on one server connection would be used on another), no startup `options`
        (pgbouncer refuses them); the time zone is set with SET, which pgbouncer tracks per
        client; the statement timeouts are the server's or the pooler's (`connect_query`, or
        ALTER ROLE ... SET), and the client deadline holds whatever they are.
        """
        kwargs: dict[str, Any] = {
            "autocommit": True,
            # libpq's connect_timeout is whole seconds (at least 2): a new connection to a
            # hung server gives up instead of holding a pool worker for minutes.
            "connect_timeout": max(2, math.ceil(connect_timeout_s)),
        }
        if transaction_pooler:
            kwargs["prepare_threshold"] = None
        else:
            kwargs["options"] = session_options(statement_timeout_s)
        pool: AsyncConnectionPool[Any] = _Pool(
            with_keepalives(url),
            min_size=min_size,
            max_size=max_size,
            open=False,
            timeout=statement_timeout_s,  # how long a caller may wait for a free connection
            kwargs=kwargs,
            configure=_configure_pooled if transaction_pooler else _configure,
            name="orderflow",
        )
        try:
            await pool.open(wait=True, timeout=connect_timeout_s)
        except psycopg.OperationalError as exc:
            await pool.close()
            raise StoreUnavailable(f"cannot connect to the database: {exc}") from exc
        try:
            yield cls(pool, statement_timeout_s=statement_timeout_s)
        finally:
            await pool.close()

    @asynccontextmanager
    async def connection(self, operation: str) -> AsyncIterator[AsyncConnection[Any]]:
        """A pooled connection for one operation, under its deadline and the error edge.

        A statement this connection prepared before a migration changed the columns it returns
        (another process ran `orderflow migrate`) fails on the server with "cached plan must not
        change result type", and would on every later use: the connection is closed, so the
        pool opens a fresh one that prepares its statements anew, and the operation fails as
        unavailable, which callers already retry (the API answers 503 once)."""
        async with database_edge(operation, self.deadline_s), self.pool.connection() as conn:
            try:
                yield conn
            except pg_errors.FeatureNotSupported as exc:
                if exc.diag.source_function != STALE_PLAN_CHECK:
                    raise
                await conn.close()
                raise StoreUnavailable(
                    f"{operation}: the schema changed under a prepared statement; reconnecting"
                ) from exc


async def _configure(conn: AsyncConnection[Any]) -> None:
    """Every pooled connection parses json/jsonb with orjson (the aggregates the executor reads
    arrive as jsonb; orjson parses them several times faster than the standard library)."""
    set_json_loads(orjson.loads, conn)


async def _configure_pooled(conn: AsyncConnection[Any]) -> None:
    """`_configure` behind a transaction pooler, plus the time zone (a parameter pgbouncer
    restores on whichever server connection serves this client)."""
    await _configure(conn)
    await conn.execute(SET_UTC)
