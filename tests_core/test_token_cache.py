"""The API's memory of token holders: found principals for a while, unknown tokens never."""

from __future__ import annotations

import asyncio

import pytest

from orderflow_core.model import Principal
from orderflow_core.states import Role
from orderflow_core.testing import FakeClock
from orderflow_core.testing.memory import InMemoryUsers
from orderflow_core.token_cache import CachedUsers

ALICE = Principal("alice", Role.CUSTOMER)


class CountingUsers(InMemoryUsers):
    def __init__(self, users: dict[str, Principal]) -> None:
        super().__init__(users)
        self.lookups = 0

    async def principal_for_token_hash(self, token_hash: str) -> Principal | None:
        self.lookups += 1
        return await super().principal_for_token_hash(token_hash)


def _lookup(users: CachedUsers, digest: str) -> Principal | None:
    return asyncio.run(users.principal_for_token_hash(digest))


def test_a_found_principal_is_remembered_until_its_time_runs_out() -> None:
    clock, directory = FakeClock(), CountingUsers({"h-alice": ALICE})
    users = CachedUsers(directory, clock, ttl_s=5)
    assert _lookup(users, "h-alice") == ALICE
    clock.advance(4.9)
    assert _lookup(users, "h-alice") == ALICE
    assert directory.lookups == 1
    directory.by_hash["h-alice"] = Principal("alice", Role.OPERATOR)  # role changed
    clock.advance(0.1)
    assert _lookup(users, "h-alice") == Principal("alice", Role.OPERATOR)
    assert directory.lookups == 2


def test_an_unknown_token_is_asked_for_every_time_so_a_new_token_works_at_once() -> None:
    clock, directory = FakeClock(), CountingUsers({})
    users = CachedUsers(directory, clock, ttl_s=5)
    assert _lookup(users, "h-bob") is None
    directory.by_hash["h-bob"] = ALICE
    assert _lookup(users, "h-bob") == ALICE
    assert directory.lookups == 2


def test_a_revoked_token_is_forgotten_when_its_entry_expires() -> None:
    clock, directory = FakeClock(), CountingUsers({"h-alice": ALICE})
    users = CachedUsers(directory, clock, ttl_s=5)
    assert _lookup(users, "h-alice") == ALICE
    del directory.by_hash["h-alice"]
    clock.advance(5)
    assert _lookup(users, "h-alice") is None
    assert _lookup(users, "h-alice") is None
    assert directory.lookups == 3


def test_zero_seconds_remembers_nothing() -> None:
    clock, directory = FakeClock(), CountingUsers({"h-alice": ALICE})
    users = CachedUsers(directory, clock, ttl_s=0)
    for _ in range(3):
        assert _lookup(users, "h-alice") == ALICE
    assert directory.lookups == 3


def test_the_oldest_entry_makes_room_when_full() -> None:
    clock = FakeClock()
    directory = CountingUsers({f"h{i}": Principal(f"u{i}", Role.CUSTOMER) for i in range(3)})
    users = CachedUsers(directory, clock, ttl_s=60, max_entries=2)
    for digest in ("h0", "h1", "h2"):
        _lookup(users, digest)
    assert directory.lookups == 3
    _lookup(users, "h2")
    _lookup(users, "h1")
    assert directory.lookups == 3, "the two newest are remembered"
    _lookup(users, "h0")
    assert directory.lookups == 4, "the oldest was evicted"


@pytest.mark.parametrize(("ttl_s", "max_entries"), [(-1, 10), (5, 0)])
def test_nonsense_settings_are_refused(ttl_s: float, max_entries: int) -> None:
    with pytest.raises(ValueError):
        CachedUsers(InMemoryUsers(), FakeClock(), ttl_s=ttl_s, max_entries=max_entries)
