"""`PgUsers`: the `Users` port on PostgreSQL (only token hashes are stored), and the user
directory that `orderflow seed` and `orderflow user …` manage."""

from __future__ import annotations

from datetime import datetime, timedelta

import attrs

from orderflow_core.model import Principal
from orderflow_core.ports import Clock
from orderflow_core.states import Role
from orderflow_core.system_clock import SystemClock
from orderflow_pg.database import Database
from orderflow_pg.queries import execute, fetch_all, fetch_one
from orderflow_pg.rows import Row

# How stale a user's "last used" mark may get before a lookup writes it again.
LAST_USED_EVERY_S = 60.0


@attrs.frozen
class UserRecord:
    """What `orderflow user list` shows of a user: never its token or the token's hash."""

    user_id: str
    role: Role
    created_at: datetime
    token_set_at: datetime
    disabled_at: datetime | None
    last_used_at: datetime | None

    @property
    def disabled(self) -> bool:
        return self.disabled_at is not None


def _record(row: Row) -> UserRecord:
    return UserRecord(
        user_id=row["user_id"],
        role=Role(row["role"]),
        created_at=row["created_at"],
        token_set_at=row["token_set_at"],
        disabled_at=row["disabled_at"],
        last_used_at=row["last_used_at"],
    )


class PgUsers:
    """Who holds which token: read by authentication, written by `orderflow seed` and
    `orderflow user …`.

    `clock` stamps creation, token changes and use; a lookup marks its user as used only when
    the mark is older than `last_used_every_s`, so authentication writes a user's row at most
    once per that interval, never once per request.
    """

    def __init__(
        self,
        database: Database,
        clock: Clock | None = None,
        *,
        last_used_every_s: float = LAST_USED_EVERY_S,
    ) -> None:
        self._db = database
        self.clock: Clock = clock or SystemClock()
        self.last_used_every = timedelta(seconds=last_used_every_s)

    async def principal_for_token_hash(self, token_hash: str) -> Principal | None:
        """The enabled user whose token hashes to `token_hash`, if any."""
        now = self.clock.now()
        params = {"token_hash": token_hash, "now": now, "stale_before": now - self.last_used_every}
        async with self._db.connection("principal_for_token_hash") as conn:
            row = await fetch_one(conn, "principal_for_token_hash", params)
        return Principal(user_id=row["user_id"], role=Role(row["role"])) if row else None

    async def create_user(self, user_id: str, role: Role, token_hash: str) -> bool:
        """Add a user; False (and nothing written) when the name is taken."""
        params = {
            "user_id": user_id,
            "role": role.value,
            "token_hash": token_hash,
            "now": self.clock.now(),
        }
        async with self._db.connection("create_user") as conn:
            return await fetch_one(conn, "create_user", params) is not None

    async def replace_token(self, user_id: str, token_hash: str) -> bool:
        """Give the user this token hash; False when it had it already or does not exist."""
        params = {"user_id": user_id, "token_hash": token_hash, "now": self.clock.now()}
        async with self._db.connection("replace_token") as conn:
            return await fetch_one(conn, "replace_token", params) is not None

    async def set_disabled(self, user_id: str, disabled: bool) -> bool:
        """Disable or enable the user; False when it was so already (or does not exist)."""
        name = "disable_user" if disabled else "enable_user"
        async with self._db.connection(name) as conn:
            row = await fetch_one(conn, name, {"user_id": user_id, "now": self.clock.now()})
        return row is not None

    async def user(self, user_id: str) -> UserRecord | None:
        """One user's record, if the name exists."""
        async with self._db.connection("user_by_name") as conn:
            row = await fetch_one(conn, "user_by_name", {"user_id": user_id})
        return _record(row) if row else None

    async def list_users(self) -> list[UserRecord]:
        """Every user, oldest first."""
        async with self._db.connection("list_users") as conn:
            return [_record(r) for r in await fetch_all(conn, "list_users")]

    async def upsert_user(self, user_id: str, role: Role, token_hash: str) -> None:
        """Create a user or give it a new role and token (kept for the benchmark's nodes)."""
        params = {"user_id": user_id, "role": role.value, "token_hash": token_hash}
        async with self._db.connection("upsert_user") as conn:
            await execute(conn, "upsert_user", params)

    async def has_users(self) -> bool:
        """Whether anyone exists yet."""
        async with self._db.connection("has_users") as conn:
            row = await fetch_one(conn, "has_users")
        return bool(row and row["found"])
