"""`orderflow prune` and `orderflow archive find`: retention by hand (docs/retention.md).

`orderflow prune [--older-than DURATION] [--archive-dir DIR] [--dry-run]` runs one prune pass
(the one `worker` and `serve` run on a schedule) and prints what it removed per kind; bad input
is one line and exit 2; another pruner running is one line and exit 1.
`orderflow archive find ORDER_ID [--archive-dir DIR]` prints the archived copy of one order.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NoReturn, TextIO
from uuid import UUID

import orjson
import psycopg

from orderflow import runtime
from orderflow.config import Settings, parse_duration
from orderflow_core import SystemClock
from orderflow_core.errors import StoreUnavailable
from orderflow_pg import migrate
from orderflow_pg.prune import Policy, Pruner, PruneReport, find_archived

log = logging.getLogger("orderflow.prune")
PRUNE = "prune"
ARCHIVE = "archive"
PRUNE_HELP = (
    "archive and remove what the retention policy allows (finished orders, old feed events, "
    "expired idempotency keys, old audit entries of removed orders), print the counts and exit"
)
ARCHIVE_HELP = "read the archive of removed orders: `archive find ORDER_ID`"


def _one_line_error(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    parser.exit(2, f"{parser.prog}: {message}\n")


def _duration(value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r}: {exc}") from None


def _order_id(value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an order id (a UUID)") from None


def add_parsers(commands: Any) -> None:
    """Add `prune` and `archive` to the CLI's subcommands (an argparse subparsers action)."""
    prune = commands.add_parser(PRUNE, help=PRUNE_HELP, description=PRUNE_HELP)
    setattr(prune, "error", functools.partial(_one_line_error, prune))  # noqa: B010
    prune.add_argument(
        "--older-than",
        type=_duration,
        metavar="DURATION",
        help="keep nothing older than this for this pass (e.g. 30d, 12h, 0s); each kind's "
        "ORDERFLOW_RETENTION_* applies when it is shorter. Unfinished orders and orders waiting "
        "for a person are never removed",
    )
    prune.add_argument(
        "--archive-dir", type=Path, metavar="DIR", help="default: ORDERFLOW_ARCHIVE_DIR"
    )
    prune.add_argument(
        "--dry-run", action="store_true", help="count what would go; change and write nothing"
    )
    archive = commands.add_parser(ARCHIVE, help=ARCHIVE_HELP, description=ARCHIVE_HELP)
    setattr(archive, "error", functools.partial(_one_line_error, archive))  # noqa: B010
    actions = archive.add_subparsers(dest="archive_action", required=True, metavar="ACTION")
    find = actions.add_parser("find", help="print one archived order as JSON")
    setattr(find, "error", functools.partial(_one_line_error, find))  # noqa: B010
    find.add_argument("order_id", type=_order_id, help="the order's id")
    find.add_argument(
        "--archive-dir", type=Path, metavar="DIR", help="default: ORDERFLOW_ARCHIVE_DIR"
    )


def policy(settings: Settings) -> Policy:
    """The configured retention as the pruner's policy."""
    r = settings.retention
    return Policy(
        orders_s=r.orders_s,
        feed_s=r.feed_s,
        idempotency_s=r.idempotency_s,
        audit_s=r.audit_s,
        batch=r.batch,
    )


async def prune(settings: Settings, args: argparse.Namespace) -> None:
    """One prune pass; its report on stdout. Another pruner at work: one line, exit 1."""
    archive_dir = args.archive_dir or settings.archive_dir
    async with runtime.database_url(settings) as url:
        await migrate(url)
        pruner = Pruner(url, SystemClock(), policy(settings), archive_dir)
        report = await pruner.run(dry_run=args.dry_run, older_than_s=args.older_than)
    if report is None:
        raise PrunerBusy("another pruner is running (a worker's scheduled pass?); try again")
    print_report(report, sys.stdout)


class PrunerBusy(Exception):
    """Another process holds the pruner's lock."""


def print_report(report: PruneReport, out: TextIO) -> None:
    for line in report.lines():
        print(line, file=out, flush=True)


def find(settings: Settings, args: argparse.Namespace) -> int:
    """`orderflow archive find`: the newest archived copy of the order, one JSON line."""
    directory = args.archive_dir or settings.archive_dir
    if not directory.is_dir():
        print(f"orderflow archive find: no archive at {directory}", file=sys.stderr)
        return 1
    doc = find_archived(directory, args.order_id)
    if doc is None:
        print(
            f"orderflow archive find: order {args.order_id} is not in the archive at {directory}",
            file=sys.stderr,
        )
        return 1
    sys.stdout.write(orjson.dumps(doc).decode() + "\n")
    return 0


@asynccontextmanager
async def scheduled_pruning(
    url: str, settings: Settings, stop: asyncio.Event
) -> AsyncIterator[None]:
    """Prune every ORDERFLOW_PRUNE_INTERVAL_S while the block runs (0: never). Every `worker`
    and `serve` runs this; the pruner's advisory lock lets one pass run at a time across them,
    the others skip theirs. A pass cancelled by the stop rolls back its batch (an order already
    archived then stays, archived twice later)."""
    interval = settings.retention.interval_s
    if interval == 0:
        yield
        return
    pruner = Pruner(url, SystemClock(), policy(settings), settings.archive_dir)
    task = asyncio.create_task(_prune_every(pruner, interval, stop), name="pruner")
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _prune_every(pruner: Pruner, interval_s: float, stop: asyncio.Event) -> None:
    skipped = failed = False
    while not stop.is_set():
        try:
            report = await pruner.run()
        except (psycopg.Error, OSError, StoreUnavailable) as exc:
            if not failed:
                log.warning(
                    "prune pass failed (%s); retrying every %g s", one_line(exc), interval_s
                )
            failed = True
        else:
            failed = False
            if report is None:
                if not skipped:
                    log.info("prune pass skipped: another pruner holds the lock")
                skipped = True
            else:
                skipped = False
                if any(report.kinds().values()):
                    log.info("pruned: %s", ", ".join(report.lines()))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval_s):
                await stop.wait()


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
