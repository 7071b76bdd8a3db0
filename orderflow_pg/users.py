"""`PgUsers`: the `Users` port on PostgreSQL (only token hashes are stored)."""

from __future__ import annotations

from orderflow_core.model import Principal
from orderflow_core.states import Role
from orderflow_pg.database import Database
from orderflow_pg.queries import execute, fetch_one


class PgUsers:
    """Who holds which token: read by authentication, written by `orderflow seed`."""

    def __init__(self, database: Database) -> None:
        self._db = database

    async def principal_for_token_hash(self, token_hash: str) -> Principal | None:
        """The user whose token hashes to `token_hash`, if any."""
        async with self._db.connection("principal_for_token_hash") as conn:
            row = await fetch_one(conn, "principal_for_token_hash", {"token_hash": token_hash})
        return Principal(user_id=row["user_id"], role=Role(row["role"])) if row else None

    async def upsert_user(self, user_id: str, role: Role, token_hash: str) -> None:
        """Create a user or give it a new role and token (seeding, token rotation)."""
        params = {"user_id": user_id, "role": role.value, "token_hash": token_hash}
        async with self._db.connection("upsert_user") as conn:
            await execute(conn, "upsert_user", params)

    async def has_users(self) -> bool:
        """Whether anyone exists yet: seeding generates tokens only for an empty directory."""
        async with self._db.connection("has_users") as conn:
            row = await fetch_one(conn, "has_users")
        return bool(row and row["found"])
