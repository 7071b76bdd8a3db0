"""The two seeded users; only hashes of their tokens are stored."""

from __future__ import annotations

import secrets
from typing import Protocol

from orderflow.config import Settings
from orderflow_core import Role, hash_token

CUSTOMER = "order_customer"
OPERATOR = "order_operator"


class UserAdmin(Protocol):
    """What seeding needs from the user table."""

    async def upsert_user(self, user_id: str, role: Role, token_hash: str) -> None: ...

    async def has_users(self) -> bool: ...


async def seed_users(users: UserAdmin, settings: Settings) -> dict[str, str]:
    """Create or update the seeded users; returns the tokens that must be printed once.

    Tokens from the environment are (re)applied on every start and never printed; otherwise
    tokens are generated at the first seed only, printed once, and exist afterwards only as
    hashes.
    """
    configured = {CUSTOMER: settings.customer_token, OPERATOR: settings.operator_token}
    first_seed = not await users.has_users()
    shown: dict[str, str] = {}
    for user_id, role in ((CUSTOMER, Role.CUSTOMER), (OPERATOR, Role.OPERATOR)):
        token = configured[user_id]
        if token is None and first_seed:
            token = secrets.token_urlsafe(24)
            shown[user_id] = token
        if token is not None:
            await users.upsert_user(user_id, role, hash_token(token))
    return shown
