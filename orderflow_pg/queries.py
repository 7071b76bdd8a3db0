"""The store's SQL: named blocks of `queries.sql`, read once, run with bound parameters."""

from __future__ import annotations

import functools
import importlib.resources
import re
from collections import Counter
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from orderflow_pg.rows import Params, Row

Connection = AsyncConnection[Any]

# A block starts with `-- name --` on its own line, then one line of description.
_BLOCK_START = re.compile(r"^-- (?P<name>[a-z_]+) --$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, str]:
    """Split a `.sql` file into its named blocks (comments kept; PostgreSQL ignores them)."""
    queries: dict[str, str] = {}
    starts = list(_BLOCK_START.finditer(text))
    for match, following in zip(starts, [*starts[1:], None], strict=True):
        end = following.start() if following else len(text)
        body = text[match.end() : end].strip()
        if match["name"] in queries:
            raise ValueError(f"query {match['name']!r} is defined twice")
        queries[match["name"]] = body
    return queries


@functools.cache
def queries() -> dict[str, str]:
    """Every named query of the store, loaded once per process."""
    text = importlib.resources.files("orderflow_pg").joinpath("queries.sql").read_text("utf-8")
    return parse_queries(text)


# The statements this process's stores sent, by name (`query` is looked up once per statement
# sent): what `/metrics` reports as `orderflow_db_statements_total`. BEGIN and COMMIT, which
# psycopg sends around a transaction, are not among them.
SENT: Counter[str] = Counter()


def query(name: str) -> str:
    """One named query, counted as sent; a KeyError here is a typo in the code, not a runtime
    condition."""
    text = queries()[name]
    SENT[name] += 1
    return text


def statements_sent() -> dict[str, int]:
    """How many statements of each name this process has sent so far."""
    return dict(SENT)


async def fetch_all(conn: Connection, name: str, params: Params | None = None) -> list[Row]:
    """Rows of a named query, as dicts keyed by column name."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query(name), params)
        return await cur.fetchall()


async def fetch_one(conn: Connection, name: str, params: Params | None = None) -> Row | None:
    """The first row of a named query, or None."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query(name), params)
        return await cur.fetchone()


async def execute(conn: Connection, name: str, params: Params | None = None) -> int:
    """Run a named statement; the number of rows it touched."""
    async with conn.cursor() as cur:
        await cur.execute(query(name), params)
        return cur.rowcount
