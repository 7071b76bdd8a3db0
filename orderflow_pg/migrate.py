"""The migration runner: applies shipped `migrations/NNNN_*.sql` files in order, once each."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.resources
import re
import sys
from datetime import UTC, datetime
from typing import Any

import attrs
import psycopg

from orderflow_core.errors import OrderflowError, StoreUnavailable
from orderflow_pg.errors import MigrationChecksumMismatch
from orderflow_pg.queries import Connection, execute, fetch_all, fetch_one

# Any constant shared by every runner; "orderflow" in ASCII, to be recognisable in pg_locks.
LOCK_KEY = 0x6F72646572666C6F
_FILE_NAME = re.compile(r"^(?P<version>\d{4})_[a-z0-9_]+\.sql$")


@attrs.frozen
class MigrationFile:
    """One shipped migration: its number, file name, SQL and the sha256 it is recorded with."""

    version: int
    name: str
    sql: str
    checksum: str


def migration_files() -> list[MigrationFile]:
    """The migrations shipped as package data, in order (found from an installed wheel too)."""
    folder = importlib.resources.files("orderflow_pg.migrations")
    found = []
    for entry in folder.iterdir():
        match = _FILE_NAME.match(entry.name)
        if match:
            data = entry.read_bytes()
            checksum = hashlib.sha256(data).hexdigest()
            found.append(
                MigrationFile(int(match["version"]), entry.name, data.decode("utf-8"), checksum)
            )
    return sorted(found, key=lambda f: f.version)


def _check_unchanged(files: list[MigrationFile], applied: dict[int, dict[str, Any]]) -> None:
    for file in files:
        recorded = applied.get(file.version)
        if recorded is not None and recorded["checksum"] != file.checksum:
            raise MigrationChecksumMismatch(
                f"migration {file.name} was changed after it was applied "
                f"(recorded sha256 {recorded['checksum'][:12]}…, file {file.checksum[:12]}…); "
                "restore the file and put the change in a new migration",
                migration=file.name,
            )


async def pending_migrations(conn: Connection) -> list[str]:
    """Names of shipped migrations not yet applied; raises if an applied one changed."""
    files = migration_files()
    ledger = await fetch_one(conn, "schema_migrations_exists")
    if not (ledger and ledger["found"]):
        return [f.name for f in files]
    applied = {r["version"]: r for r in await fetch_all(conn, "applied_migrations")}
    _check_unchanged(files, applied)
    return [f.name for f in files if f.version not in applied]


async def _apply_pending(conn: Connection) -> list[str]:
    await execute(conn, "create_schema_migrations")
    files = migration_files()
    applied = {r["version"]: r for r in await fetch_all(conn, "applied_migrations")}
    _check_unchanged(files, applied)
    names = []
    for file in files:
        if file.version in applied:
            continue
        async with conn.transaction():
            await conn.execute(file.sql.encode("utf-8"))  # a whole file: several statements
            record = {
                "version": file.version,
                "name": file.name,
                "checksum": file.checksum,
                "applied_at": datetime.now(UTC),
            }
            await execute(conn, "record_migration", record)
        names.append(file.name)
    return names


async def migrate(url: str) -> list[str]:
    """Apply every pending migration under an advisory lock; the names applied (maybe none).

    Safe to run twice and from several processes at once: the lock serialises runners, and each
    re-reads the ledger after taking it.
    """
    try:
        connect = psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10)
        async with await connect as conn:
            await execute(conn, "migration_lock", {"lock_key": LOCK_KEY})
            try:
                return await _apply_pending(conn)
            finally:
                await execute(conn, "migration_unlock", {"lock_key": LOCK_KEY})
    except psycopg.OperationalError as exc:
        raise StoreUnavailable(f"migrate: {exc}") from exc


def run_migrate(url: str) -> int:
    """`orderflow migrate`: apply pending migrations, say what was applied; the exit status."""
    try:
        applied = asyncio.run(migrate(url))
    except OrderflowError as exc:
        print(f"orderflow migrate: {exc.code}: {exc.detail}", file=sys.stderr)
        return 1
    except psycopg.Error as exc:  # a migration's SQL failed: its transaction was rolled back
        print(f"orderflow migrate: migration_failed: {exc}", file=sys.stderr)
        return 1
    for name in applied:
        print(f"applied {name}")
    if not applied:
        print("schema is up to date")
    return 0
