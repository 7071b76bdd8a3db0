"""The PostgreSQL harness: one server, one migrated template per session, a fresh copy per test.

`ORDERFLOW_TEST_DATABASE_URL` points at a server we may create databases on; without it a
throwaway embedded server is started under a temporary directory (never under /root).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from typing import Any, TypeVar

import psycopg
import pytest
from citus_fixtures import citus_database, citus_store, citus_url  # noqa: F401 (Citus)
from processes import Proc
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from orderflow_pg import PgOrderStore, migrate, start_embedded, stop_embedded
from orderflow_pg.embedded import process_exists

T = TypeVar("T")
URL_VARIABLE = "ORDERFLOW_TEST_DATABASE_URL"
Run = Callable[[Awaitable[T]], T]


def with_database(url: str, dbname: str) -> str:
    """The same server, another database."""
    return make_conninfo(url, dbname=dbname)


def admin_execute(url: str, statement: sql.Composable) -> None:
    """Run one statement outside a transaction (CREATE/DROP DATABASE need that)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


@pytest.fixture(scope="session")
def admin_url() -> Iterator[str]:
    """A URL on which this session may create and drop databases."""
    configured = os.environ.get(URL_VARIABLE)
    if configured:
        yield configured
        return
    home = tempfile.mkdtemp(prefix="orderflow-test-pg-", dir="/tmp")
    try:
        yield start_embedded(home)
    finally:
        stop_embedded(home)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def session_databases(admin_url: str) -> Iterator[tuple[str, Iterator[str]]]:
    """A migrated template database, and a source of fresh names; all dropped at the end."""
    if os.environ.get(URL_VARIABLE):
        _drop_stale_databases(admin_url)
    prefix = f"orderflow_test_{os.getpid()}_{secrets.token_hex(3)}"
    template = f"{prefix}_template"
    created = [template]
    admin_execute(admin_url, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(template)))
    names = (f"{prefix}_{n}" for n in itertools.count(1))

    def track() -> Iterator[str]:
        for name in names:
            created.append(name)
            yield name

    try:
        asyncio.run(migrate(with_database(admin_url, template)))
        yield template, track()
    finally:
        for name in reversed(created):
            _drop(admin_url, name)


@pytest.fixture
def fresh_database_url(
    admin_url: str, session_databases: tuple[str, Iterator[str]]
) -> Iterator[str]:
    """An empty (unmigrated) database of its own, for the migration tests; dropped after it."""
    _, names = session_databases
    name = next(names)
    admin_execute(admin_url, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield with_database(admin_url, name)
    _drop(admin_url, name)


@pytest.fixture
def pg_url(admin_url: str, session_databases: tuple[str, Iterator[str]]) -> Iterator[str]:
    """A migrated database of this test's own, copied from the session's template; dropped
    after the test, so a session never piles up databases for its end."""
    template, names = session_databases
    name = next(names)
    create = sql.SQL("CREATE DATABASE {} TEMPLATE {}")
    admin_execute(admin_url, create.format(sql.Identifier(name), sql.Identifier(template)))
    yield with_database(admin_url, name)
    _drop(admin_url, name)


def _drop(admin_url: str, name: str) -> None:
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
    admin_execute(admin_url, drop.format(sql.Identifier(name)))


STALE_DATABASES = (
    "SELECT datname FROM pg_database WHERE datname ~ '^orderflow_test_[0-9]+_[0-9a-f]+_'"
)


def _drop_stale_databases(admin_url: str) -> None:
    """Databases of earlier sessions on this machine whose process is gone (killed before its
    teardown): they would slow every later CREATE and DROP DATABASE on the server."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        names = [row[0] for row in conn.execute(STALE_DATABASES).fetchall()]
    for name in names:
        pid = int(name.split("_")[2])
        if not process_exists(pid):
            _drop(admin_url, name)


@pytest.fixture
def run() -> Iterator[Run[Any]]:
    """Run a coroutine on this test's own event loop (no asyncio plugin needed)."""
    with asyncio.Runner() as runner:
        yield runner.run


@pytest.fixture
def pg_store(pg_url: str, run: Run[Any]) -> Iterator[PgOrderStore]:
    """A PgOrderStore on this test's database, opened and closed on the test's loop."""
    stack = AsyncExitStack()
    store = run(stack.enter_async_context(PgOrderStore.open(pg_url, max_size=8)))
    try:
        yield store
    finally:
        run(stack.aclose())


@pytest.fixture
def pg_plain_store(pg_url: str, run: Run[Any]) -> Iterator[PgOrderStore]:
    """`pg_store` without its optimisations (`ORDERFLOW_STORE_OPTIMISATIONS=0`)."""
    stack = AsyncExitStack()
    opened = PgOrderStore.open(pg_url, max_size=8, optimisations=False)
    store = run(stack.enter_async_context(opened))
    try:
        yield store
    finally:
        run(stack.aclose())


def database_name(url: str) -> str:
    """Which database a URL names."""
    return str(conninfo_to_dict(url)["dbname"])


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """Real processes a test starts (append them); each is closed after the test."""
    started: list[Proc] = []
    yield started
    for proc in started:
        proc.close()
