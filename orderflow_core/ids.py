"""Identifiers that sort by the time they were made.

Orders, steps, attempts, history and events are all keyed by uuids in B-tree indexes. A random
uuid (version 4) lands each insert on a random leaf page: once an index outgrows the server's
cache every insert reads a page, and the first change of each page after a checkpoint writes the
whole page to the WAL (a full-page image, 8 KB). An id that starts with the time it was made
(version 7, RFC 9562) lands next to the ids made just before it, on the few pages at the index's
right edge that are already in the cache and already imaged.

An event's id must come out the same every time its transition is decided again (consumers
de-duplicate by it, and the store writes a replayed id once), so it is derived, not drawn: the
order id's first six bytes (its time, for an order id of version 7) and then a hash of the order
id and the event's number (version 8, the RFC's layout for ids of one's own design).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable
from uuid import UUID

_VERSION_7 = 0x7 << 76
_VERSION_8 = 0x8 << 76
_VARIANT = 0b10 << 62
_RANDOM_BITS = (1 << 74) - 1
_RAND_B = (1 << 62) - 1  # the random bits after the variant (the 12 before it: after the version)


def uuid7(
    *, time_ns: Callable[[], int] = time.time_ns, random_bytes: Callable[[int], bytes] = os.urandom
) -> UUID:
    """A version 7 uuid: 48 bits of Unix time in milliseconds, then 74 random bits.

    Time and randomness are parameters so a test can fix them; ids made in the same millisecond
    sort in no particular order among themselves (nothing relies on their order: they only need
    to land near each other)."""
    millis = time_ns() // 1_000_000
    rand = int.from_bytes(random_bytes(10), "big") & _RANDOM_BITS
    value = (millis & 0xFFFF_FFFF_FFFF) << 80 | _VERSION_7 | _spread(rand)
    return UUID(int=value)


def event_id(order_id: UUID, seq: int) -> UUID:
    """The id of an order's `seq`-th event: the same for the same order and number, always."""
    digest = hashlib.sha1(order_id.bytes + seq.to_bytes(8, "big"), usedforsecurity=False)
    rand = int.from_bytes(digest.digest()[:10], "big") & _RANDOM_BITS
    value = (order_id.int >> 80) << 80 | _VERSION_8 | _spread(rand)
    return UUID(int=value)


def step_key(order_id: UUID, kind: str, seq: int) -> str:
    """The idempotency key of an order's `seq`-th step, of `kind`: sent with every attempt of
    the step, the same for the same order, kind and number, always."""
    return f"{order_id}:{kind}:{seq}"


def _spread(rand: int) -> int:
    """74 random bits into the places the RFC's layout leaves them: 12 after the version (bits
    75-64), the variant, then 62 (bits 61-0)."""
    return (rand >> 62) << 64 | _VARIANT | (rand & _RAND_B)


_PLACED_SCOPE = re.compile(
    r"[a-z_]+:([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
)


def idempotency_placement(user_id: str, scope: str, key: str) -> UUID:
    """Where a client's idempotency record is kept, computed from its key alone: the order a
    scope names (`refund:<order id>`), else md5(user, scope, key) read as a uuid. A store
    distributed by order (Citus) keeps the record on that order's shard; a create there gives
    its order this id (`keyed_order_id`), so the order and its key land on one shard. The
    migration 0027 computes the same in SQL."""
    named = _PLACED_SCOPE.fullmatch(scope)
    if named is not None:
        return UUID(named[1])
    text = f"{user_id}\x1f{scope}\x1f{key}".encode()
    return UUID(bytes=hashlib.md5(text, usedforsecurity=False).digest())


def keyed_order_id(user_id: str, key: str) -> UUID:
    """The id of the order a create under (user, `key`) makes when orders are distributed:
    the create's idempotency placement, so the order and its key share a shard. (On a single
    server orders take time-ordered ids, `uuid7`, whose inserts stay on the indexes' hot pages.)"""
    return idempotency_placement(user_id, "create_order", key)
