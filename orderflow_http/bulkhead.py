"""A bulkhead: at most N calls in flight to one service, so a slow upstream is not hammered.

Why not a bare `asyncio.Semaphore`: a slot here is a token owned by the call that acquired it,
released exactly once on every exit (return, error, exception, cancellation) and only by its
holder; a waiter that is cancelled holds nothing and passes on a slot it was just handed; and
the `reject` policy answers "busy" at once instead of queueing.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

AdmissionPolicy = Literal["queue", "reject"]


class BulkheadBusyError(Exception):
    """A local admission refusal (policy `reject`): says nothing about the service itself."""

    code = "busy"


class Slot:
    """Proof of holding one place in a bulkhead; only `Bulkhead.slot()` creates them."""

    __slots__ = ("_owner", "released")

    def __init__(self, owner: Bulkhead) -> None:
        self._owner = owner
        self.released = False


class Bulkhead:
    """At most `limit` holders at a time; `policy` decides what a caller finds when it is full.

    Use it as `async with bulkhead.slot():` around one physical call (never around a backoff).
    """

    def __init__(self, limit: int, policy: AdmissionPolicy = "queue") -> None:
        if limit < 1:
            raise ValueError("a bulkhead needs a limit of at least 1")
        if policy not in ("queue", "reject"):
            raise ValueError("policy must be 'queue' or 'reject'")
        self.limit = limit
        self.policy: AdmissionPolicy = policy
        self._holders: set[Slot] = set()
        self._waiters: deque[asyncio.Future[Slot]] = deque()

    @property
    def in_flight(self) -> int:
        """How many slots are held right now."""
        return len(self._holders)

    @property
    def waiting(self) -> int:
        """How many callers are queued for a slot."""
        return sum(1 for w in self._waiters if not w.done())

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Slot]:
        """Hold one slot for the body of the `async with`; BulkheadBusyError under `reject`."""
        token = await self._acquire()
        try:
            yield token
        finally:
            self._release(token)

    async def _acquire(self) -> Slot:
        if len(self._holders) < self.limit and not self.waiting:
            return self._grant()
        if self.policy == "reject":
            raise BulkheadBusyError(f"{self.limit} calls already in flight")
        waiter: asyncio.Future[Slot] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # Handed a slot in the same tick we were cancelled: pass it on, never leak it.
                self._release(waiter.result())
            raise
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _grant(self) -> Slot:
        token = Slot(self)
        self._holders.add(token)
        return token

    def _release(self, token: Slot) -> None:
        assert token._owner is self, "a slot is released only by the bulkhead that granted it"
        assert not token.released, "a slot is released exactly once"
        assert token in self._holders, "only a holder releases a slot"
        token.released = True
        self._holders.discard(token)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(self._grant())
                return
