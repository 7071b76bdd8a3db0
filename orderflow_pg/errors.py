"""The error edge: psycopg's exceptions become the core's, and the runner's own errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from psycopg import errors as pg_errors

from orderflow_core import deadlines
from orderflow_core.errors import DuplicateIdempotencyKey, OrderflowError, StoreUnavailable
from orderflow_pg.deadline import hard_deadline

IDEMPOTENCY_CONSTRAINT = "api_idempotency_pkey"
# On Citus a create's order takes the id its idempotency key gives (`ids.keyed_order_id`): a
# second create under the key meets the order's key first, and only creates insert orders.
KEYED_ORDER_CONSTRAINT = "orders_pkey"


class MigrationChecksumMismatch(OrderflowError):
    """An applied migration file was edited afterwards: refuse to run on a schema we can't trust."""

    code = "migration_checksum_mismatch"


def _is_idempotency_key(constraint: str | None) -> bool:
    """Whether a unique violation is of the idempotency key: on Citus a shard reports its
    own copy's name (`api_idempotency_pkey_102008`), and a keyed order's id is its key."""
    if constraint is None:
        return False
    base, _, suffix = constraint.rpartition("_")
    return constraint == IDEMPOTENCY_CONSTRAINT or (
        base in (IDEMPOTENCY_CONSTRAINT, KEYED_ORDER_CONSTRAINT) and suffix.isdigit()
    )


def _names_shard_key(exc: psycopg.Error) -> bool:
    """Whether Citus relayed a shard's unique violation of the key by its message alone: met by
    rows it copied from the coordinator (an internal error), or inside the one-order write
    that runs on the shard's node (`orderflow_apply_order`, without the constraint's name)."""
    return any(
        f'unique constraint "{name}_' in str(exc)
        for name in (IDEMPOTENCY_CONSTRAINT, KEYED_ORDER_CONSTRAINT)
    )


@asynccontextmanager
async def database_edge(operation: str, deadline_s: float) -> AsyncIterator[None]:
    """Run one store operation under a client-side deadline and translate psycopg's errors.

    The server's `statement_timeout` cancels a slow statement first; this deadline is the
    backstop for a hung server or network, or a pool that cannot hand out a connection. It
    holds even then: a connection that does not answer its cancellation is dropped.

    Inside a unit of work with a deadline of its own (an API request: `orderflow_core.deadlines`)
    the operation gets what is left of it, if that is less; nothing left: unavailable at once.
    """
    bounded_s = deadlines.bound(deadline_s)
    if bounded_s <= 0:
        raise StoreUnavailable(f"{operation}: the request's deadline has passed")
    try:
        async with hard_deadline(bounded_s):
            yield
    except TimeoutError as exc:
        whose = "" if bounded_s == deadline_s else " (what the request's deadline left)"
        raise StoreUnavailable(f"{operation}: no answer within {bounded_s:.3g} s{whose}") from exc
    except pg_errors.UniqueViolation as exc:
        if _is_idempotency_key(exc.diag.constraint_name) or _names_shard_key(exc):
            raise DuplicateIdempotencyKey("idempotency key already used") from exc
        raise
    except pg_errors.InternalError_ as exc:
        if _names_shard_key(exc):
            raise DuplicateIdempotencyKey("idempotency key already used") from exc
        raise
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        # OperationalError covers QueryCanceled (statement_timeout), lost connections,
        # serialization/deadlock rollbacks and psycopg_pool.PoolTimeout.
        raise StoreUnavailable(f"{operation}: {type(exc).__name__}: {exc}") from exc
