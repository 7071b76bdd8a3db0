"""An in-memory store that offers the optional batched writes (`GroupCommits`,
`ClaimsWithStarts`), for the tests of the executor's batched path: the in-memory store itself
offers the contract alone."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TypeVar
from uuid import UUID

from orderflow_core.commits import update_each
from orderflow_core.model import Change, Claim, OrderAggregate
from orderflow_core.testing import InMemoryOrderStore

T = TypeVar("T")


class BatchingMemoryStore(InMemoryOrderStore):
    """`update_many` as each `update` in turn, `claim_and_start` as `claim_due` then
    `update_many` (nothing can crash in between in memory)."""

    async def update_many(
        self, updates: Sequence[tuple[UUID, Callable[[OrderAggregate], tuple[Change, T]]]]
    ) -> list[T | Exception]:
        return await update_each(self, list(updates))

    async def claim_and_start(
        self,
        *,
        owner: str,
        now: datetime,
        limit: int,
        lease_s: float,
        start: Callable[[Claim, OrderAggregate], tuple[Change, T]],
    ) -> list[tuple[Claim, T | Exception]]:
        claims = await self.claim_due(owner=owner, now=now, limit=limit, lease_s=lease_s)
        started = await self.update_many(
            [(claim.order_id, functools.partial(start, claim)) for claim in claims]
        )
        return list(zip(claims, started, strict=True))
