"""The two seeded users; only hashes of their tokens are stored."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Protocol

import attrs

from orderflow.config import Settings
from orderflow_core import Role, hash_token

CUSTOMER = "order_customer"
OPERATOR = "order_operator"
# The seeded users, their roles and the variables their tokens may come from.
SEEDED = (
    (CUSTOMER, Role.CUSTOMER, "ORDERFLOW_CUSTOMER_TOKEN"),
    (OPERATOR, Role.OPERATOR, "ORDERFLOW_OPERATOR_TOKEN"),
)


def new_token() -> str:
    """A fresh bearer token: 32 random bytes, 43 URL-safe characters."""
    return secrets.token_urlsafe(32)


class UserAdmin(Protocol):
    """What seeding needs from the user table."""

    async def create_user(self, user_id: str, role: Role, token_hash: str) -> bool: ...

    async def replace_token(self, user_id: str, token_hash: str) -> bool: ...


@attrs.frozen
class SeedReport:
    """What a seed did: tokens to print once, and users whose stored token was replaced."""

    generated: dict[str, str]  # user -> new token, shown once
    replaced: list[tuple[str, str]]  # (user, the variable whose token replaced the stored one)

    def lines(self) -> list[str]:
        """What `serve`, `api` and `seed` print about it."""
        shown = [
            f"generated token for {user} (shown once, only its hash is stored): {token}"
            for user, token in self.generated.items()
        ]
        warned = [
            f"warning: {user}'s stored token was replaced by the one in {variable}; the token it "
            f"had before (generated at the first start, or from `orderflow user rotate {user}`) "
            f"no longer works. Unset {variable} to keep a rotated token."
            for user, variable in self.replaced
        ]
        return shown + warned


async def seed_users(
    users: UserAdmin, settings: Settings, make_token: Callable[[], str] = new_token
) -> SeedReport:
    """Create the seeded users that do not exist; apply tokens from the environment.

    A token from the environment is applied on every start and never printed; when it differs
    from the stored one, the stored token is replaced and the report says so. Without one, a
    token is generated only when the user is created (printed once, then only its hash exists):
    a later start leaves it, and any rotation, alone.
    """
    configured = {CUSTOMER: settings.customer_token, OPERATOR: settings.operator_token}
    generated: dict[str, str] = {}
    replaced: list[tuple[str, str]] = []
    for user_id, role, variable in SEEDED:
        token = configured[user_id]
        if token is None:
            token = make_token()
            if await users.create_user(user_id, role, hash_token(token)):
                generated[user_id] = token
            continue
        digest = hash_token(token)
        if not await users.create_user(user_id, role, digest) and await users.replace_token(
            user_id, digest
        ):
            replaced.append((user_id, variable))
    return SeedReport(generated, replaced)
