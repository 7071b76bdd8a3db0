"""The few ports the core needs; adapters satisfy them structurally."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol, TypeVar, runtime_checkable
from uuid import UUID

import attrs

from orderflow_core.model import (
    ApiIdempotency,
    AuditEntry,
    Change,
    Claim,
    HistoryEntry,
    Item,
    Order,
    OrderAggregate,
    OutboxEvent,
    Principal,
)
from orderflow_core.outcomes import Outcome
from orderflow_core.states import OrderState

T = TypeVar("T")


class Clock(Protocol):
    """Where time comes from: tests drive a FakeClock, production the system clock."""

    def now(self) -> datetime:
        """An aware UTC datetime."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of this clock's time."""
        ...


@attrs.frozen
class OrderCount:
    """How many orders are in `state` waiting for `reason` (None: not waiting)."""

    state: OrderState
    reason: str | None
    orders: int


@attrs.frozen
class CallContext:
    """What every external call carries (headers `X-Order-Id`, `X-Step-Id`, `Idempotency-Key`)."""

    order_id: UUID
    step_id: UUID
    idempotency_key: str


class Warehouse(Protocol):
    """Holds and gives back stock."""

    async def reserve(self, call: CallContext, items: Sequence[Item]) -> Outcome:
        """Succeeded({reservation_id, status}) or Refused("out_of_stock")."""
        ...

    async def release(self, call: CallContext, reservation_key: str) -> Outcome:
        """Succeeded({status: released|nothing_to_release}); the key is the reserve step's."""
        ...


class Payments(Protocol):
    """Moves money; the status call is how an unknown outcome is resolved."""

    async def charge(self, call: CallContext, amount_minor: int, currency: str) -> Outcome:
        """Succeeded({payment_reference, status}), Refused("card_declined"); pending: Unknown."""
        ...

    async def charge_status(self, call: CallContext, charge_key: str) -> Outcome:
        """Succeeded({status: succeeded|failed|pending, payment_reference?}) or
        Refused("not_found") when no charge was received under `charge_key`."""
        ...

    async def refund(self, call: CallContext, payment_reference: str, amount_minor: int) -> Outcome:
        """Succeeded({refund_reference, status}) or Refused("refund_rejected")."""
        ...


class Shipping(Protocol):
    """Hands the parcel to a carrier."""

    async def ship(self, call: CallContext, items: Sequence[Item]) -> Outcome:
        """Succeeded({shipment_id}) or Refused("undeliverable")."""
        ...


class Notifications(Protocol):
    """Sends the customer a message (process version 2, after the carrier confirmed)."""

    async def notify(self, call: CallContext, template: str) -> Outcome:
        """Succeeded({message_id}) or Refused("undeliverable_address")."""
        ...


@attrs.frozen
class Services:
    """The outbound ports the saga calls; without `notifications`, a notification step is
    blocked (a permanent technical error) and its order waits on the attention list."""

    warehouse: Warehouse
    payments: Payments
    shipping: Shipping
    notifications: Notifications | None = None


class UnitOfWork(Protocol):
    """The writing side of the order store, its whole contract: a unit of work per order
    (`create`, `update`), and the step leases (`claim_due`, `renew_lease`).

    Every write goes through `create` or `update`, which apply one `Change` atomically
    (rule 4). Errors of the underlying technology surface as `StoreUnavailable` (transient) or
    `DuplicateIdempotencyKey`; nothing else leaks. A store may offer more (`GroupCommits`,
    `ClaimsWithStarts`): the executor uses it when it is there, the contract alone otherwise.
    """

    async def create(self, change: Change) -> None:
        """Insert a new order with its first steps; `DuplicateIdempotencyKey` if the key exists."""
        ...

    async def update(
        self, order_id: UUID, decide: Callable[[OrderAggregate], tuple[Change, T]]
    ) -> T:
        """Lock the order, let `decide` compute a change from it, apply it, return decide's value.

        If `change.guard` does not hold on the aggregate `decide` was given, nothing of the
        change is written except an audit entry of the rejected stale result, and decide's
        value is returned (decide saw the same aggregate, so it knows). If the guard held there
        but the store finds the change fenced off when writing it (a concurrent writer won),
        it writes only that audit entry and raises `ConcurrentUpdate`: a returned value always
        belongs to an applied change or to one decide itself saw rejected. Raises `NotFound`
        for an unknown order.
        """
        ...

    async def claim_due(
        self, *, owner: str, now: datetime, limit: int, lease_s: float
    ) -> list[Claim]:
        """Lease up to `limit` steps that are due (pending/retry_scheduled with
        next_attempt_at <= now) or running with an expired lease: status running,
        attempt + 1, owner and expiry set, all in one statement."""
        ...

    async def renew_lease(self, claim: Claim, *, now: datetime, lease_s: float) -> bool:
        """Extend the lease while (attempt, owner, running, not expired) hold; False otherwise."""
        ...


@runtime_checkable
class GroupCommits(Protocol):
    """What a store may offer beside the `UnitOfWork`: many orders' updates in one round trip.
    Optional: the executor's writer checks for it (`isinstance`) and, without it, sends the
    same updates one `update` after the other. It may not promise more than those would."""

    async def update_many(
        self, updates: Sequence[tuple[UUID, Callable[[OrderAggregate], tuple[Change, T]]]]
    ) -> list[T | Exception]:
        """`update` for each (order_id, decide) pair, in as few transactions as the store can
        (a group commit: the executor commits the results and next intents of many orders at
        once). Each order keeps `update`'s guarantees: its change is all or nothing, fenced by
        its own guard (a fenced-off change writes only its rejection). An order whose `decide`
        raised, that is gone, whose change was fenced off at the write or whose write failed
        gets that exception in its place; the others still commit (a store that shares one
        statement between orders retries each order alone once that statement fails). A store
        error (`StoreUnavailable`) is raised for the batch: any subset of its changes may then
        have been applied. Pairs of the same order are applied in the given order, each
        deciding on the aggregate the one before it left.
        """
        ...


@runtime_checkable
class ClaimsWithStarts(Protocol):
    """What a store may offer beside the `UnitOfWork`: a claim and the intents it starts in one
    store call. Optional: the executor checks for it (`isinstance`) and, without it, claims
    (`claim_due`) and then writes each start with `update` (a claim whose start fails is left
    to lease expiry)."""

    async def claim_and_start(
        self,
        *,
        owner: str,
        now: datetime,
        limit: int,
        lease_s: float,
        start: Callable[[Claim, OrderAggregate], tuple[Change, T]],
    ) -> list[tuple[Claim, T | Exception]]:
        """`claim_due`, then each claim's `start(claim, aggregate)` applied as
        `GroupCommits.update_many` applies a decision, in one transaction where the store can
        (the executor's claims and the intents they start: a claim is then never durable
        without its intent). Each claim comes back with its start's value, or the exception
        that start met (as in `update_many`); a store error (`StoreUnavailable`) is raised
        for the whole call."""
        ...


class OrderReads(Protocol):
    """The reading side of the order store (the API's views, the tests' checks); as
    `OutboxFeed` is the relay's side. Reads take no locks and change nothing."""

    async def load(self, order_id: UUID) -> OrderAggregate | None:
        """The order with its steps (and their attempts) and refunds."""
        ...

    async def load_with_history(
        self, order_id: UUID
    ) -> tuple[OrderAggregate, list[HistoryEntry]] | None:
        """The aggregate and its history, oldest first, as of one moment: no change committed
        between reading the one and the other, so the order's state is its last entry's."""
        ...

    async def history(self, order_id: UUID) -> list[HistoryEntry]:
        """Every transition of the order, oldest first."""
        ...

    async def audit_entries(self, order_id: UUID) -> list[AuditEntry]:
        """The audit log of the order, oldest first."""
        ...

    async def find_idempotency(self, user_id: str, scope: str, key: str) -> ApiIdempotency | None:
        """The record a client's idempotency key is bound to, if any."""
        ...

    async def list_orders(
        self,
        *,
        customer_id: str | None,
        state: OrderState | None,
        limit: int,
        before: tuple[datetime, UUID] | None,
    ) -> list[Order]:
        """Orders newest first (created_at, order_id descending), strictly before `before`."""
        ...

    async def list_waiting(
        self,
        *,
        customer_id: str | None,
        state: OrderState | None,
        limit: int,
        before: tuple[datetime, UUID] | None,
    ) -> list[Order]:
        """Orders waiting for a person, newest waiting first ((attention_since, order_id)
        descending), strictly before `before`."""
        ...

    async def count_orders(self) -> list[OrderCount]:
        """How many orders there are per (state, attention reason); only pairs that occur."""
        ...

    async def events(self, *, after: int, limit: int) -> list[OutboxEvent]:
        """Outbox events with seq > after, oldest first."""
        ...


class OrderStore(UnitOfWork, OrderReads, Protocol):
    """Both sides of the order store, as one adapter provides them (the API's service uses
    both; the executor needs only the `UnitOfWork`)."""


class WakeUps(Protocol):
    """Announcements that a step may have become due (PostgreSQL: LISTEN/NOTIFY), so an idle
    executor claims at once instead of at its next poll. Only a shortcut: polling stays the
    safety net, so an implementation may never announce anything."""

    async def listen(self, wake: Callable[[], None]) -> None:
        """Call `wake` on every announcement until cancelled; ride out (log, retry) a lost
        connection rather than raise."""
        ...


class Users(Protocol):
    """Who holds which token; only token hashes are stored."""

    async def principal_for_token_hash(self, token_hash: str) -> Principal | None:
        """The user whose token hashes to `token_hash`, if any."""
        ...
