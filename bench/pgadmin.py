"""The benchmark's own databases on the configured server: created fresh, dropped after."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo


def db_url(server_url: str, dbname: str) -> str:
    """The same server, another database (a URL stays a URL: asyncpg takes only URLs)."""
    parts = urlsplit(server_url)
    if parts.scheme in ("postgresql", "postgres"):
        return urlunsplit(parts._replace(path="/" + dbname))
    return make_conninfo(server_url, dbname=dbname)


def _admin(server_url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(server_url, autocommit=True, connect_timeout=10)


def _drop(name: str) -> sql.Composed:
    return sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))


def create_database(server_url: str, name: str, template: str | None = None) -> str:
    """CREATE DATABASE (from `template` when given); its URL."""
    stmt = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        stmt = sql.SQL("{} TEMPLATE {}").format(stmt, sql.Identifier(template))
    with _admin(server_url) as conn:
        conn.execute(_drop(name))
        conn.execute(stmt)
    return db_url(server_url, name)


def drop_database(server_url: str, name: str) -> None:
    with _admin(server_url) as conn:
        conn.execute(_drop(name))


def drop_leftovers(server_url: str, prefix: str) -> list[str]:
    """Drop databases an interrupted run left behind (names starting with `prefix`)."""
    with _admin(server_url) as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (prefix + "%",)
        ).fetchall()
    for (name,) in rows:
        drop_database(server_url, name)
    return [name for (name,) in rows]


def wait_no_sessions(server_url: str, name: str, timeout_s: float = 15.0) -> None:
    """Until no backend is connected to `name`: their statistics are flushed at exit."""
    deadline = time.monotonic() + timeout_s
    with _admin(server_url) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)
            ).fetchone()
            if row is None or row[0] == 0:
                return
            time.sleep(0.1)


def xact_commit(server_url: str, name: str) -> int:
    """pg_stat_database.xact_commit of one database, read from a fresh snapshot."""
    with _admin(server_url) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (name,)
        ).fetchone()
    return int(row[0]) if row else 0


def server_facts(server_url: str) -> dict[str, Any]:
    """Version, the settings that decide commit cost, and autovacuum (off, the tables are never
    analyzed and each connection keeps the plans it cached while they were small)."""
    with _admin(server_url) as conn:
        facts: dict[str, Any] = {}
        for name in ("server_version", "synchronous_commit", "fsync", "max_connections",
                     "shared_buffers", "wal_level", "autovacuum"):
            row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
            facts[name] = row[0] if row else None
    params = conninfo_to_dict(server_url)
    facts["host"] = params.get("host", "")
    facts["port"] = params.get("port", "5432")
    return facts
