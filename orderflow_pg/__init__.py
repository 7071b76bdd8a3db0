"""orderflow's PostgreSQL adapter: the order store, the user directory, the wake-ups
(LISTEN/NOTIFY) and the migrations."""

from __future__ import annotations

from orderflow_pg.embedded import EmbeddedDatabaseError, start_embedded, stop_embedded
from orderflow_pg.errors import MigrationChecksumMismatch
from orderflow_pg.migrate import migrate, migration_files, run_migrate
from orderflow_pg.store import PgOrderStore
from orderflow_pg.users import PgUsers
from orderflow_pg.wakeups import PgWakeUps

__all__ = [
    "EmbeddedDatabaseError",
    "MigrationChecksumMismatch",
    "PgOrderStore",
    "PgUsers",
    "PgWakeUps",
    "migrate",
    "migration_files",
    "run_migrate",
    "start_embedded",
    "stop_embedded",
]
