"""`orderflow user …` as a person types it: a token printed once and stored only as its hash,
a list without secrets, and bad input refused with one line, exit 2, nothing changed."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import psycopg
import pytest
from conftest import Run
from processes import free_port
from user_commands import orderflow, user_cli

from orderflow_core import Role
from orderflow_pg import PgOrderStore

pytestmark = pytest.mark.postgres


def _users_table(pg_url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(pg_url) as conn:
        return conn.execute("SELECT * FROM users ORDER BY user_id").fetchall()


def test_add_prints_a_new_token_once_and_stores_only_its_hash(pg_url: str) -> None:
    added = user_cli(pg_url, "add", "alice@shop.example", "--role", "customer")
    assert added.returncode == 0, added.stderr
    [token] = added.stdout.split()
    assert len(token) >= 32
    assert token not in added.stderr
    rows = _users_table(pg_url)
    assert [r[0] for r in rows] == ["alice@shop.example"]
    assert rows[0][2] == hashlib.sha256(token.encode()).hexdigest()
    assert token not in repr(rows)

    other = user_cli(pg_url, "add", "ops-1", "--role", "operator")
    assert other.returncode == 0, other.stderr
    assert other.stdout.strip() != token

    listed = user_cli(pg_url, "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:3] == ["NAME", "ROLE", "STATUS"]
    assert lines[1].split()[:3] == ["alice@shop.example", "customer", "active"]
    assert lines[2].split()[:3] == ["ops-1", "operator", "active"]
    assert lines[1].endswith("never")  # last used
    as_json = json.loads(user_cli(pg_url, "list", "--json").stdout)
    assert [(u["name"], u["role"], u["last_used_at"]) for u in as_json["users"]] == [
        ("alice@shop.example", "customer", None),
        ("ops-1", "operator", None),
    ]
    everything = listed.stdout + json.dumps(as_json)
    assert token not in everything
    assert rows[0][2] not in everything  # nor its hash


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["add", "bob", "--role", "admin"], "unknown role 'admin'"),
        (["add", "bob", "--role", "Customer"], "unknown role 'Customer'"),
        (["add", "alice", "--role", "customer"], "user 'alice' already exists"),
        (["add", "alice", "--role", "operator"], "user 'alice' already exists"),
        (["add", "bad name", "--role", "customer"], "user name 'bad name' is not valid"),
        (["add", "ops:1", "--role", "operator"], "user name 'ops:1' is not valid"),
        (["add", "-x", "--role", "customer"], "required: name"),
        (["add", "bob", "--role", "customer", "extra"], "unrecognized arguments: extra"),
        (["list", "--all"], "unrecognized arguments: --all"),
        (["add", "x" * 65, "--role", "customer"], "is not valid"),
        (["add", "order_customer", "--role", "customer"], "seeded user"),
        (["add", "bob"], "--role"),
        (["rotate", "nobody"], "no user named 'nobody'"),
        (["disable", "nobody"], "no user named 'nobody'"),
        (["enable", "nobody"], "no user named 'nobody'"),
        (["rotate", "bad name"], "is not valid"),
        (["remove", "alice"], "invalid choice"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_changes_nothing(
    pg_url: str, pg_store: PgOrderStore, run: Run[Any], args: list[str], says: str
) -> None:
    run(pg_store.users.create_user("alice", Role.CUSTOMER, "h-alice"))
    before = _users_table(pg_url)
    done = user_cli(pg_url, *args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert says in done.stderr
    assert _users_table(pg_url) == before


def test_a_start_with_another_token_variable_says_which_user_it_changed(pg_url: str) -> None:
    first = orderflow(pg_url, "seed")  # the tokens of processes.base_env
    assert first.returncode == 0, first.stderr
    assert "warning" not in first.stdout + first.stderr
    rotated = user_cli(pg_url, "rotate", "order_operator")
    assert "ORDERFLOW_OPERATOR_TOKEN" in rotated.stderr  # the note: a start puts it back
    again = orderflow(pg_url, "seed", ORDERFLOW_CUSTOMER_TOKEN="another-customer-token-2")
    assert again.returncode == 0, again.stderr
    warnings = [line for line in again.stdout.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2
    assert warnings[0].startswith("warning: order_customer's stored token was replaced by")
    assert "ORDERFLOW_CUSTOMER_TOKEN" in warnings[0]
    assert warnings[1].startswith("warning: order_operator's stored token was replaced by")
    assert "another-customer-token-2" not in again.stdout + again.stderr
    assert rotated.stdout.strip() not in again.stdout + again.stderr
    same = orderflow(pg_url, "seed", ORDERFLOW_CUSTOMER_TOKEN="another-customer-token-2")
    assert "warning" not in same.stdout + same.stderr


def test_an_unreachable_database_is_one_line_naming_the_variable() -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    done = user_cli(url, "list")
    assert done.returncode == 2
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("orderflow user list: cannot use the database of ORDERFLOW_DATABASE_URL")
