"""The user directory on PostgreSQL: disabled users authenticate nobody, "last used" is written
at most once a minute however often a token is looked up, and seeding says which stored tokens
a start replaced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import Run

from orderflow.config import load_settings
from orderflow.seed import CUSTOMER, OPERATOR, seed_users
from orderflow_core import Principal, Role, hash_token
from orderflow_core.testing import FakeClock
from orderflow_pg import PgOrderStore

pytestmark = pytest.mark.postgres


def _settings(tmp_path: Path, **tokens: str) -> Any:
    env = {"ORDERFLOW_HOME": str(tmp_path)}
    env.update({f"ORDERFLOW_{k.upper()}_TOKEN": v for k, v in tokens.items()})
    return load_settings(env)


def _last_used(pg_store: PgOrderStore, run: Run[Any], user: str) -> Any:
    record = run(pg_store.users.user(user))
    assert record is not None
    return record.last_used_at


def test_a_disabled_user_authenticates_nobody_until_enabled(
    pg_store: PgOrderStore, run: Run[Any]
) -> None:
    users = pg_store.users
    assert run(users.create_user("alice", Role.CUSTOMER, "h-alice")) is True
    assert run(users.create_user("alice", Role.OPERATOR, "h-other")) is False  # name taken
    assert run(users.principal_for_token_hash("h-alice")) == Principal("alice", Role.CUSTOMER)
    assert run(users.principal_for_token_hash("h-other")) is None
    assert run(users.set_disabled("alice", True)) is True
    assert run(users.set_disabled("alice", True)) is False  # already
    assert run(users.principal_for_token_hash("h-alice")) is None
    assert run(users.set_disabled("alice", False)) is True
    assert run(users.principal_for_token_hash("h-alice")) == Principal("alice", Role.CUSTOMER)
    assert run(users.set_disabled("nobody", True)) is False


def test_a_replaced_token_hash_stops_authenticating_and_the_new_one_starts(
    pg_store: PgOrderStore, run: Run[Any]
) -> None:
    users = pg_store.users
    run(users.create_user("bob", Role.OPERATOR, "h-1"))
    assert run(users.replace_token("bob", "h-1")) is False  # unchanged
    assert run(users.replace_token("bob", "h-2")) is True
    assert run(users.principal_for_token_hash("h-1")) is None
    assert run(users.principal_for_token_hash("h-2")) == Principal("bob", Role.OPERATOR)
    assert run(users.replace_token("nobody", "h-3")) is False


def test_last_used_is_written_once_a_minute_not_once_per_lookup(
    pg_store: PgOrderStore, run: Run[Any]
) -> None:
    clock = FakeClock()
    users = pg_store.users
    users.clock = clock
    run(users.create_user("alice", Role.CUSTOMER, "h-alice"))
    assert _last_used(pg_store, run, "alice") is None
    first = clock.now()
    run(users.principal_for_token_hash("h-alice"))
    assert _last_used(pg_store, run, "alice") == first
    for _ in range(5):
        clock.advance(10)  # 50 s of lookups: no write
        run(users.principal_for_token_hash("h-alice"))
    assert _last_used(pg_store, run, "alice") == first
    clock.advance(11)  # 61 s after the mark
    run(users.principal_for_token_hash("h-alice"))
    second = clock.now()
    assert _last_used(pg_store, run, "alice") == second
    run(users.set_disabled("alice", True))
    clock.advance(120)
    assert run(users.principal_for_token_hash("h-alice")) is None  # refused: not a use
    assert _last_used(pg_store, run, "alice") == second


def test_a_first_seed_prints_generated_tokens_and_a_second_leaves_them(
    pg_store: PgOrderStore, run: Run[Any], tmp_path: Path
) -> None:
    # A user added before the first seed does not stop the seeded users from being made.
    run(pg_store.users.create_user("alice", Role.CUSTOMER, "h-alice"))
    first = run(seed_users(pg_store.users, _settings(tmp_path)))
    assert set(first.generated) == {CUSTOMER, OPERATOR}
    assert first.replaced == []
    for user, token in first.generated.items():
        assert len(token) >= 32
        principal = run(pg_store.users.principal_for_token_hash(hash_token(token)))
        assert principal == Principal(user, Role.CUSTOMER if user == CUSTOMER else Role.OPERATOR)
    again = run(seed_users(pg_store.users, _settings(tmp_path)))
    assert (again.generated, again.replaced, again.lines()) == ({}, [], [])
    token = first.generated[CUSTOMER]
    assert run(pg_store.users.principal_for_token_hash(hash_token(token))) is not None


def test_a_start_with_another_token_variable_says_which_stored_token_it_replaced(
    pg_store: PgOrderStore, run: Run[Any], tmp_path: Path
) -> None:
    settings = _settings(tmp_path, customer="customer-token-one-1", operator="operator-token-1-1")
    created = run(seed_users(pg_store.users, settings))
    assert (created.generated, created.replaced) == ({}, [])
    same = run(seed_users(pg_store.users, settings))
    assert same.lines() == []
    changed = _settings(tmp_path, customer="customer-token-two-2", operator="operator-token-1-1")
    report = run(seed_users(pg_store.users, changed))
    assert report.replaced == [(CUSTOMER, "ORDERFLOW_CUSTOMER_TOKEN")]
    [line] = report.lines()
    assert line.startswith(f"warning: {CUSTOMER}'s stored token was replaced")
    assert "ORDERFLOW_CUSTOMER_TOKEN" in line
    assert "customer-token" not in line  # never a token in a message
    old = hash_token("customer-token-one-1")
    assert run(pg_store.users.principal_for_token_hash(old)) is None
    new = hash_token("customer-token-two-2")
    assert run(pg_store.users.principal_for_token_hash(new)) == Principal(CUSTOMER, Role.CUSTOMER)
