"""A short memory of who holds which token, so an API request does not cost a database read.

A found principal is remembered for `ttl_s` seconds by token hash; an unknown token is never
remembered (a token seeded a moment ago works at once). The price: a token that was rotated,
whose user was disabled or whose user's role changed keeps its old meaning for up to `ttl_s`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from orderflow_core.model import Principal
from orderflow_core.ports import Clock, Users


class CachedUsers:
    """`Users` in front of another `Users`: principals by token hash, kept for `ttl_s`."""

    def __init__(self, users: Users, clock: Clock, *, ttl_s: float, max_entries: int = 1024):
        if ttl_s < 0 or max_entries < 1:
            raise ValueError("ttl_s must be >= 0 and max_entries >= 1")
        self._users = users
        self._clock = clock
        self._ttl = timedelta(seconds=ttl_s)
        self._max_entries = max_entries
        self._found: dict[str, tuple[Principal, datetime]] = {}

    async def principal_for_token_hash(self, token_hash: str) -> Principal | None:
        """The remembered principal while fresh, else the one the wrapped directory names."""
        now = self._clock.now()
        remembered = self._found.get(token_hash)
        if remembered is not None and now < remembered[1]:
            return remembered[0]
        principal = await self._users.principal_for_token_hash(token_hash)
        self._found.pop(token_hash, None)
        if principal is not None and self._ttl:
            while len(self._found) >= self._max_entries:
                del self._found[next(iter(self._found))]  # the oldest entry
            self._found[token_hash] = (principal, now + self._ttl)
        return principal
