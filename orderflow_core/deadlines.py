"""One deadline for a whole unit of work (an API request), honoured by every store operation in it.

A store operation has a deadline of its own (the PostgreSQL adapter's: the statement timeout
plus a margin). A request makes several (token lookup, create, reads on a replay), so without a
shared deadline a request could take a multiple of it. The request sets a `Deadline` for the
task serving it (`running_under`); an adapter cuts each operation's own deadline to what is left
(`bound`), and gives up at once when nothing is. Waiting for the client's body does not count
(`paused`): the body has a deadline of its own.

Times are the event loop's monotonic clock: a deadline is about how long the caller waits, not
about business time (which goes through the `Clock` port).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class Deadline:
    """A point in (loop) time by which a unit of work must end; `on_move` hears of every move
    (None while paused), so a watchdog can follow it."""

    def __init__(
        self, seconds: float, on_move: Callable[[float | None], None] | None = None
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self.seconds = seconds
        self.at = self._loop.time() + seconds
        self._paused_since: float | None = None
        self._on_move = on_move

    def remaining(self) -> float:
        """Seconds left (negative once passed); the full remainder while paused."""
        now = self._loop.time() if self._paused_since is None else self._paused_since
        return self.at - now

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The clock stops for the block (a nested pause counts once)."""
        if self._paused_since is not None:
            yield
            return
        self._paused_since = self._loop.time()
        if self._on_move is not None:
            self._on_move(None)
        try:
            yield
        finally:
            self.at += self._loop.time() - self._paused_since
            self._paused_since = None
            if self._on_move is not None:
                self._on_move(self.at)


_CURRENT: ContextVar[Deadline | None] = ContextVar("orderflow_deadline", default=None)


@contextmanager
def running_under(deadline: Deadline | None) -> Iterator[None]:
    """`deadline` is the current one for the block (None: none), and for tasks created in it."""
    token = _CURRENT.set(deadline)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current() -> Deadline | None:
    """The deadline of the unit of work under way, if any."""
    return _CURRENT.get()


def bound(seconds: float) -> float:
    """`seconds`, cut to what the current deadline leaves (0 or less: nothing is left)."""
    deadline = _CURRENT.get()
    return seconds if deadline is None else min(seconds, deadline.remaining())


@contextmanager
def paused() -> Iterator[None]:
    """The current deadline (if any) does not run during the block."""
    deadline = _CURRENT.get()
    if deadline is None:
        yield
        return
    with deadline.paused():
        yield


@contextmanager
def detached() -> Iterator[None]:
    """No deadline for the block: a task it creates serves many callers (a shared writer), so
    it must not inherit the deadline of the caller that happened to start it."""
    with running_under(None):
        yield
