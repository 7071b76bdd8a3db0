"""Group commit: many orders' changes in one store call, with the natural batching of a single
writer.

Each caller hands in one order's `update` (order id and decision) and waits for its own value.
One writer task sends what is queued to the store, as one `update_many` when the store offers
that (`GroupCommits`), else one `update` after the other: when the writer is idle, a
change goes out at once (no sleep, so latency at low load does not grow); what queues up while
a commit runs goes together in the next one. A caller's value arrives only after the store call
that carried its change returned, so what it decided is durable before the caller goes on
(an executor makes its next external call only then).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar
from uuid import UUID

from orderflow_core import deadlines
from orderflow_core.errors import StoreUnavailable
from orderflow_core.model import Change, OrderAggregate
from orderflow_core.observe import NULL_OBSERVER, Observer
from orderflow_core.ports import GroupCommits, UnitOfWork

T = TypeVar("T")
Item = TypeVar("Item")
Result = TypeVar("Result")

log = logging.getLogger("orderflow.commits")

Decide = Callable[[OrderAggregate], tuple[Change, Any]]


class SingleWriter(Generic[Item, Result]):
    """The single-writer batcher: callers `submit` items and wait each for its own result; one
    writer task hands what queued to `commit` as one batch (at most `max_batch`). When the
    writer is idle an item goes out at once (no sleep, so latency at low load does not grow);
    what queues up while a batch is committed goes together in the next one. `commit` returns
    one result or exception per item; a `StoreUnavailable` it raises reaches every caller of
    the batch, any other exception too (logged: a bug), and the writer goes on.

    Used by the executor's results (`CommitQueue`) and the PostgreSQL store's creates."""

    def __init__(
        self,
        commit: Callable[[list[Item]], Awaitable[Sequence[Result | Exception]]],
        *,
        max_batch: int,
        name: str = "batch",
    ) -> None:
        self._commit_batch = commit
        self._max_batch = max_batch
        self._name = name
        self._queued: list[tuple[Item, asyncio.Future[Result]]] = []
        self._writer: asyncio.Task[None] | None = None
        self.batches = 0  # batches committed, for tests and measurements
        self.largest_batch = 0

    async def submit(self, item: Item) -> Result:
        """Queue `item` and wait until the batch that carried it was committed."""
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._queued.append((item, future))
        if self._writer is None or self._writer.done():
            with deadlines.detached():  # it writes for every caller, not for this one alone
                self._writer = asyncio.create_task(self._write())
        return await future

    async def drain(self) -> None:
        """Wait until everything queued so far is committed (or failed)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    def cancel(self) -> None:
        """Stop the writer; callers still waiting get `CancelledError`."""
        if self._writer is not None:
            self._writer.cancel()

    async def _write(self) -> None:
        try:
            while self._queued:
                batch = self._queued[: self._max_batch]
                del self._queued[: self._max_batch]
                await self._commit(batch)
        finally:  # cancelled: nobody commits for the callers still queued
            for _, future in self._queued:
                future.cancel()
            self._queued.clear()

    async def _commit(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        self.batches += 1
        self.largest_batch = max(self.largest_batch, len(batch))
        try:
            results = await self._commit_batch([item for item, _ in batch])
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except StoreUnavailable as exc:
            for _, future in batch:
                _settle(future, exception=StoreUnavailable(str(exc)))
            return
        except Exception as exc:  # a store bug: each caller sees it, the writer goes on
            log.exception("a %s of %d failed", self._name, len(batch))
            for _, future in batch:
                _settle(future, exception=exc)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if isinstance(result, Exception):
                _settle(future, exception=result)
            else:
                _settle(future, value=result)


class CommitQueue:
    """The single writer of one executor: `update` as the port has it, grouped."""

    def __init__(
        self, store: UnitOfWork, *, max_batch: int = 64, observer: Observer = NULL_OBSERVER
    ) -> None:
        self._store = store
        self._batched = store if isinstance(store, GroupCommits) else None
        self._observer = observer
        self._writer: SingleWriter[tuple[UUID, Decide], Any] = SingleWriter(
            self._commit, max_batch=max_batch, name="group commit"
        )

    @property
    def batches(self) -> int:
        """Store calls made, for tests and measurements."""
        return self._writer.batches

    @property
    def largest_batch(self) -> int:
        return self._writer.largest_batch

    async def update(
        self, order_id: UUID, decide: Callable[[OrderAggregate], tuple[Change, T]]
    ) -> T:
        """`UnitOfWork.update`, committed together with whatever else is queued."""
        value: T = await self._writer.submit((order_id, decide))
        return value

    async def drain(self) -> None:
        """Wait until everything queued so far is committed (or failed)."""
        await self._writer.drain()

    def cancel(self) -> None:
        """Stop the writer; callers still waiting get `CancelledError`."""
        self._writer.cancel()

    async def _commit(self, updates: list[tuple[UUID, Decide]]) -> Sequence[Any]:
        self._observer.commit_batch(len(updates))
        if self._batched is not None:
            return await self._batched.update_many(updates)
        return await update_each(self._store, updates)


async def update_each(
    store: UnitOfWork, updates: list[tuple[UUID, Decide]]
) -> list[Any | Exception]:
    """The updates one after the other through the contract alone: each order's exception is
    its own; a store error (`StoreUnavailable`) ends the batch, as `update_many` raises it."""
    results: list[Any | Exception] = []
    for order_id, decide in updates:
        try:
            results.append(await store.update(order_id, decide))
        except StoreUnavailable:
            raise
        except Exception as exc:  # this order's alone
            results.append(exc)
    return results


def _settle(
    future: asyncio.Future[Any], *, value: Any = None, exception: BaseException | None = None
) -> None:
    if future.done():  # the caller was cancelled meanwhile
        return
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(value)
