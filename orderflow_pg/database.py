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
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool

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
    ) -> AsyncIterator[Database]:
        """Open a pool whose connections carry `statement_timeout` and UTC; close it after.

        A session idle inside a transaction for twice the statement timeout (its process frozen
        or cut off mid-transaction) is ended by the server: its row locks go, and so does its
        hold on the outbox feed's horizon (`orderflow_pg.feed`).
        """
        options = (
            f"-c statement_timeout={round(statement_timeout_s * 1000)}"
            f" -c idle_in_transaction_session_timeout={round(2 * statement_timeout_s * 1000)}"
            " -c TimeZone=UTC"
        )
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            open=False,
            timeout=statement_timeout_s,  # how long a caller may wait for a free connection
            # libpq's connect_timeout is whole seconds (at least 2): a new connection to a
            # hung server gives up instead of holding a pool worker for minutes.
            kwargs={
                "autocommit": True,
                "options": options,
                "connect_timeout": max(2, math.ceil(connect_timeout_s)),
            },
            configure=_configure,
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
