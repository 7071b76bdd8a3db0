"""The in-memory store's claim order: embedders' FakeClock-driven tests run the same way every
time, whatever the ids and however the store indexes its live orders."""

from __future__ import annotations

import asyncio
import uuid

from orderflow_core.model import Item, Principal
from orderflow_core.service import OrderService
from orderflow_core.states import Role
from orderflow_core.testing import FakeClock, InMemoryOrderStore, InMemoryUsers

ALICE = Principal("alice", Role.CUSTOMER)


def test_steps_due_at_the_same_instant_are_claimed_in_the_order_their_orders_were_created() -> None:
    async def scenario() -> None:
        clock, store = FakeClock(), InMemoryOrderStore()
        # Ids that sort against creation order, so neither the ids nor a set's order can pass.
        descending = iter(uuid.UUID(int=n) for n in range(10**6, 0, -1))
        service = OrderService(store, clock, InMemoryUsers(), new_id=lambda: next(descending))
        created = []
        for n in range(6):
            view, _ = await service.create_order(ALICE, f"k{n}", [Item("sku", 1, 100)], "RUB")
            created.append(view.aggregate.order.order_id)
        first = await store.claim_due(owner="w", now=clock.now(), limit=4, lease_s=30)
        rest = await store.claim_due(owner="w", now=clock.now(), limit=4, lease_s=30)
        assert [c.order_id for c in first + rest] == created

    asyncio.run(scenario())
