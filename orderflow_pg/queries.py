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


# A fragment is a named block that is no statement of its own: a statement includes it where it
# says `/*@name(key=value, ...)*/`, each `{key}` of the fragment replaced by its value (SQL text
# of the file itself: an alias, a table, a bound parameter's placeholder; never a value).
FRAGMENTS = frozenset({"aggregate_of"})
_INCLUDE = re.compile(r"/\*@(?P<name>[a-z_]+)\((?P<args>.*?)\)\*/")
_SLOT = re.compile(r"\{(?P<key>[a-z_]+)\}")


def include_fragments(text: str, fragments: dict[str, str]) -> str:
    """`text` with each fragment it includes written out."""

    def expand(mark: re.Match[str]) -> str:
        if mark["name"] not in fragments:
            return mark[0]  # another mark (`one_order`'s)
        args = dict(arg.strip().split("=", 1) for arg in mark["args"].split(","))
        body = fragments[mark["name"]]
        # The fragment's own leading comment lines are left out.
        lines = [line for line in body.splitlines() if not line.startswith("--")]

        def fill(slot: re.Match[str]) -> str:
            if slot["key"] not in args:
                raise ValueError(f"{mark[0]} leaves {{{slot['key']}}} of {mark['name']} open")
            return args[slot["key"]].strip()

        return "\n" + _SLOT.sub(fill, "\n".join(lines).rstrip())

    return _INCLUDE.sub(expand, text)


# In a statement written for many orders, `/*@order x*/` marks where its one-order form
# (`one_order`) pins table alias `x` to one order, `%(order_id)s`.
_ONE_ORDER = re.compile(r"/\*@order (?P<alias>[a-z]+)\*/")
# The one-order forms, by the name they are sent under: on Citus each is pruned to one shard.
ONE_ORDER_FORMS = {"apply_order_changes": "apply_changes"}
# Statements that need the Citus extension (`orderflow_pg.distribute`).
CITUS_ONLY = frozenset(
    {
        "citus_tables",
        "distribute_table",
        "reference_table",
        "drop_local_copy",
        # citus.sql: a one-order write on its shard's node (docs/citus.md, "Writes")
        "create_apply_order",
        "distribute_apply_order",
        "apply_order",
        "number_events",
        "keep_on_coordinator",
        "insert_idempotency",
    }
)
# The Citus-only statements kept apart from queries.sql (each name in CITUS_ONLY)
CITUS_FILE = "citus.sql"


# What only the many-order form has (`/*@many{*/ ... /*}@many*/`), and what only the one-order
# form has (`/*@one ... */`).
_MANY_ONLY = re.compile(r"/\*@many\{\*/.*?/\*\}@many\*/", re.DOTALL)
_ONE_ONLY = re.compile(r"/\*@one (?P<text>.*?)\*/", re.DOTALL)
# A row lock the one-order form leaves to the statement before it.
_LOCKED = re.compile(r"FOR UPDATE[ A-Za-z]*-- @locked")


def one_order(text: str) -> str:
    """A statement's one-order form: each marked alias pinned to `%(order_id)s`, each marked
    row lock left out (taken by the statement before it in the transaction)."""
    pinned = _ONE_ORDER.sub(r"\g<alias>.order_id = %(order_id)s::uuid AND", text)
    only_one = _ONE_ONLY.sub(r"\g<text>", _MANY_ONLY.sub("", pinned))
    return _LOCKED.sub("", only_one)


@functools.cache
def queries() -> dict[str, str]:
    """Every named query of the store, loaded once per process (with the one-order forms)."""
    files = importlib.resources.files("orderflow_pg")
    blocks = parse_queries(files.joinpath("queries.sql").read_text("utf-8"))
    fragments = {name: blocks.pop(name) for name in FRAGMENTS}
    found = {name: include_fragments(body, fragments) for name, body in blocks.items()}
    for name, body in parse_queries(files.joinpath(CITUS_FILE).read_text("utf-8")).items():
        if name in found:
            raise ValueError(f"query {name!r} is defined twice")
        found[name] = body
    for name, source in ONE_ORDER_FORMS.items():
        found[name] = one_order(found[source])
    return found


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
