"""`orderflow user add | rotate | disable | enable | list`: who may call the API.

A new or rotated token is printed once, alone on stdout (so `TOKEN=$(orderflow user add …)`
works); what happened is said on stderr. Only the token's SHA-256 is stored. Bad input exits 2
with one line and changes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import re
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any, NoReturn, TextIO

from orderflow import runtime
from orderflow.config import HOME_FOLDER, Settings, embedded_database_exists
from orderflow.seed import SEEDED, new_token
from orderflow.startup import StartupError
from orderflow_core import Role, hash_token
from orderflow_core.errors import StoreUnavailable
from orderflow_pg import EmbeddedDatabaseError, migrate
from orderflow_pg.database import Database
from orderflow_pg.errors import MigrationChecksumMismatch
from orderflow_pg.users import PgUsers, UserRecord

COMMAND = "user"
HELP = "manage API users: add, rotate a token, disable, enable, list"
# Names appear in audit entries and events as `<role>:<name>`, so no colon, no spaces.
NAME_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
NAME_HELP = "1-64 letters, digits, '.', '_', '@' or '-', starting with a letter or a digit"
ROLES = {role.value: role for role in Role}
SEEDED_VARIABLE = {user: variable for user, _, variable in SEEDED}


class UserInputError(Exception):
    """Bad input to a user command: one line for the person who typed it (exit 2)."""


class _OneLineParser(argparse.ArgumentParser):
    """A parser whose usage errors, unknown arguments included, are one line and exit 2."""

    def error(self, message: str) -> NoReturn:
        _one_line_error(self, message)

    def parse_known_args(  # type: ignore[override]  # same call, extras refused here
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def _one_line_error(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    parser.exit(2, f"{parser.prog}: {message}\n")


def add_parser(commands: Any) -> None:
    """Add `user` and its actions to the CLI's subcommands (an argparse subparsers action)."""
    user = commands.add_parser(COMMAND, help=HELP, description=HELP)
    # `orderflow user` is made by the main parser's class; its errors are one line too.
    setattr(user, "error", functools.partial(_one_line_error, user))  # noqa: B010
    actions = user.add_subparsers(
        dest="user_action", required=True, metavar="ACTION", parser_class=_OneLineParser
    )
    add = actions.add_parser(
        "add", help="create a user and print its token once", description=NAME_HELP
    )
    add.add_argument("name", help="the user's name")
    add.add_argument("--role", required=True, help="customer or operator")
    for action, text in (
        ("rotate", "give a user a new token (printed once); the old one stops working"),
        ("disable", "stop a user's token from authenticating (it is kept, for `enable`)"),
        ("enable", "let a disabled user's token authenticate again"),
    ):
        actions.add_parser(action, help=text, description=text).add_argument("name")
    listing = actions.add_parser("list", help="names, roles, created, last used; never tokens")
    listing.add_argument("--json", action="store_true", help="one JSON document instead")


def run(
    args: argparse.Namespace,
    settings: Settings,
    *,
    make_token: Callable[[], str] = new_token,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run one `orderflow user …` action; the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    prog = f"orderflow user {args.user_action}"
    try:
        checked = _check(args)
        asyncio.run(_act(args.user_action, checked, settings, make_token, out, err))
    except UserInputError as exc:
        print(f"{prog}: {exc}", file=err)
        return 2
    except StartupError as exc:  # the database cannot be used at all: as every command says it
        print(f"{prog}: {exc}", file=err)
        return 2
    except StoreUnavailable as exc:
        detail = " ".join(exc.detail.split())
        print(
            f"{prog}: the database is not available ({detail}); check ORDERFLOW_DATABASE_URL",
            file=err,
        )
        return 1
    except (EmbeddedDatabaseError, MigrationChecksumMismatch, OSError) as exc:
        print(f"{prog}: {' '.join(str(exc).split())}", file=err)
        return 1
    return 0


def check_name(name: str) -> str:
    """A valid user name, or `UserInputError`."""
    if not NAME_RULE.fullmatch(name):
        raise UserInputError(f"user name {name!r} is not valid: {NAME_HELP}")
    return name


def _check(args: argparse.Namespace) -> dict[str, Any]:
    """Everything that can be refused without the database."""
    checked: dict[str, Any] = {}
    if args.user_action == "list":
        checked["json"] = args.json
        return checked
    checked["name"] = check_name(args.name)
    if args.user_action == "add":
        role = ROLES.get(args.role)
        if role is None:
            raise UserInputError(f"unknown role {args.role!r}: use customer or operator")
        if args.name in SEEDED_VARIABLE:
            raise UserInputError(
                f"{args.name} is a seeded user, created by `orderflow seed` (or at start)"
            )
        checked["role"] = role
    return checked


async def _act(
    action: str,
    checked: dict[str, Any],
    settings: Settings,
    make_token: Callable[[], str],
    out: TextIO,
    err: TextIO,
) -> None:
    if not settings.database_url and not embedded_database_exists(settings.home):
        # A second, empty database would take the user, and the running service never see it.
        raise StartupError(
            f"no embedded database under {settings.home} (nor in a {HOME_FOLDER} folder above the"
            " current directory): run this in the project where `orderflow serve` runs, or set"
            " ORDERFLOW_HOME to its .orderflow folder (or ORDERFLOW_DATABASE_URL to its database)"
        )
    async with runtime.database_url(settings) as url:
        for applied in await migrate(url):
            print(f"applied migration {applied}", file=err)
        async with Database.open(
            url, min_size=1, max_size=1, statement_timeout_s=3.0, connect_timeout_s=10.0
        ) as database:
            users = PgUsers(database)
            if action == "list":
                _print_list(await users.list_users(), checked["json"], out)
                return
            name: str = checked["name"]
            cache = f"ORDERFLOW_TOKEN_CACHE_S, {settings.token_cache_s:g} s here"
            if action == "add":
                await _add(users, name, checked["role"], make_token, out, err)
            elif action == "rotate":
                await _rotate(users, name, make_token(), cache, out, err)
            else:
                await _switch(users, name, action == "disable", cache, err)


async def _add(
    users: PgUsers,
    name: str,
    role: Role,
    make_token: Callable[[], str],
    out: TextIO,
    err: TextIO,
) -> None:
    token = make_token()
    if not await users.create_user(name, role, hash_token(token)):
        raise UserInputError(
            f"user {name!r} already exists (`orderflow user rotate {name}` gives it a new token)"
        )
    print(
        f"created {role.value} {name}; its token follows, shown once (only its SHA-256 is kept)",
        file=err,
    )
    print(token, file=out, flush=True)


async def _rotate(
    users: PgUsers, name: str, token: str, cache: str, out: TextIO, err: TextIO
) -> None:
    record = await _existing(users, name)
    await users.replace_token(name, hash_token(token))
    print(
        f"new token for {name}, shown once; the old one stops working within the API's token "
        f"cache time ({cache})",
        file=err,
    )
    if record.disabled:
        print(f"note: {name} is disabled; `orderflow user enable {name}` lets it in", file=err)
    if name in SEEDED_VARIABLE:
        variable = SEEDED_VARIABLE[name]
        print(f"note: a start with {variable} set puts that variable's token back", file=err)
    print(token, file=out, flush=True)


async def _switch(users: PgUsers, name: str, disable: bool, cache: str, err: TextIO) -> None:
    changed = await users.set_disabled(name, disable)
    if not changed:
        await _existing(users, name)
        print(f"{name} was {'disabled' if disable else 'enabled'} already", file=err)
    elif disable:
        print(
            f"disabled {name}; its token stops working within the API's token cache time ({cache})",
            file=err,
        )
    else:
        print(f"enabled {name}; its token works again at once", file=err)


async def _existing(users: PgUsers, name: str) -> UserRecord:
    record = await users.user(name)
    if record is None:
        raise UserInputError(f"no user named {name!r} (`orderflow user list` shows them)")
    return record


def _time(when: datetime | None) -> str | None:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ") if when is not None else None


def _print_list(records: list[UserRecord], as_json: bool, out: TextIO) -> None:
    rows = [
        {
            "name": r.user_id,
            "role": r.role.value,
            "status": "disabled" if r.disabled else "active",
            "created_at": _time(r.created_at),
            "token_set_at": _time(r.token_set_at),
            "last_used_at": _time(r.last_used_at),
        }
        for r in records
    ]
    if as_json:
        print(json.dumps({"users": rows}, indent=2), file=out)
        return
    header = {
        "name": "NAME",
        "role": "ROLE",
        "status": "STATUS",
        "created_at": "CREATED",
        "token_set_at": "TOKEN SET",
        "last_used_at": "LAST USED",
    }
    table = [header, *({k: v or "never" for k, v in row.items()} for row in rows)]
    widths = {k: max(len(str(line[k])) for line in table) for k in header}
    for line in table:
        print("  ".join(str(line[k]).ljust(widths[k]) for k in header).rstrip(), file=out)
