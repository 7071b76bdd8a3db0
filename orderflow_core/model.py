"""Value objects of the order process: frozen, slotted, compared by value."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any
from uuid import UUID

import attrs

from orderflow_core.states import (
    DUE_STATUSES,
    STOPPED_STATUSES,
    TERMINAL_STATES,
    AttemptOutcome,
    OrderState,
    PaymentStatus,
    RefundStatus,
    ReservationStatus,
    Role,
    StepKind,
    StepStatus,
)

JsonDict = dict[str, Any]

@attrs.frozen
class Principal:
    """An authenticated caller."""

    user_id: str
    role: Role


@attrs.frozen
class Item:
    """One order line; amounts are integer minor units (kopecks)."""

    sku: str
    quantity: int
    unit_price_minor: int

    @property
    def total_minor(self) -> int:
        return self.quantity * self.unit_price_minor


@attrs.frozen
class Attempt:
    """One try of a step: its intent (started) and, once known, its result."""

    attempt: int
    started_at: datetime
    worker: str
    finished_at: datetime | None = None
    outcome: AttemptOutcome | None = attrs.field(
        default=None, converter=attrs.converters.optional(AttemptOutcome)
    )
    error: str | None = None


@attrs.frozen
class Step:
    """A unit of external work with one idempotency key reused by every attempt."""

    step_id: UUID
    order_id: UUID
    kind: StepKind
    seq: int  # order-local creation order
    status: StepStatus
    idempotency_key: str
    created_at: datetime
    attempt: int = 0  # the last attempt number handed out: the generation
    max_attempts: int = 5
    armed_attempt: int = 0  # attempt count when the current retry budget began
    next_attempt_at: datetime | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    last_error: str | None = None
    result: JsonDict = attrs.field(factory=dict)
    refund_id: UUID | None = None
    attempts: tuple[Attempt, ...] = ()

    @property
    def is_due_or_running(self) -> bool:
        return self.status in DUE_STATUSES or self.status is StepStatus.RUNNING

    @property
    def is_stopped(self) -> bool:
        return self.status in STOPPED_STATUSES


@attrs.frozen
class Refund:
    """A refund: its own operation, state and idempotency key (lifecycle rule 3)."""

    refund_id: UUID
    order_id: UUID
    amount_minor: int
    reason: str
    status: RefundStatus
    requested_by: str
    created_at: datetime
    updated_at: datetime
    step_id: UUID
    refund_reference: str | None = None
    last_error: str | None = None


@attrs.frozen
class Order:
    """The order row: its state, and what is known about its reservation and payment."""

    order_id: UUID
    customer_id: str
    items: tuple[Item, ...]
    total_minor: int
    currency: str
    process_version: int
    state: OrderState
    created_at: datetime
    updated_at: datetime
    event_seq: int = 0  # events emitted so far; makes event ids deterministic
    state_reason: str | None = None
    reservation_id: str | None = None
    reservation_status: ReservationStatus = attrs.field(
        default=ReservationStatus.NONE, converter=ReservationStatus
    )
    reserved_at: datetime | None = None
    reservation_expires_at: datetime | None = None
    reservation_expired: bool = False
    payment_status: PaymentStatus = attrs.field(
        default=PaymentStatus.NONE, converter=PaymentStatus
    )
    payment_reference: str | None = None
    # Why the order waits for a person (an `AttentionReason` value) and since when; None when
    # it does not. Kept by every decision (`attention.settle`), read by the attention queue.
    attention_reason: str | None = None
    attention_since: datetime | None = None
    # The W3C `traceparent` of the request that created the order, when it was traced: each
    # step attempt's span links to it. Set once at creation, never changed.
    trace_parent: str | None = None

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES


@attrs.frozen
class HistoryEntry:
    """One state change of an order."""

    order_id: UUID
    seq: int
    from_state: OrderState | None
    to_state: OrderState
    at: datetime
    actor: str
    reason: str

    def event_payload(self) -> JsonDict:
        """What the state event of this change says of it (`order.<to_state>`, emitted at `at`
        with the entry's number): a store may keep the entry as that event alone."""
        return {
            "from": self.from_state.value if self.from_state else None,
            "to": self.to_state.value,
            "reason": self.reason,
            "actor": self.actor,
        }


@attrs.frozen
class AuditEntry:
    """Who did what to which order and step, when, with what outcome (lifecycle rule 5)."""

    order_id: UUID
    at: datetime
    actor: str
    action: str
    outcome: str
    step_id: UUID | None = None
    details: JsonDict = attrs.field(factory=dict)


@attrs.frozen
class OutboxEvent:
    """An event for consumers; `event_id` is deterministic so replays de-duplicate."""

    event_id: UUID
    order_id: UUID
    type: str
    payload: JsonDict
    created_at: datetime
    seq: int = 0  # assigned by the store when it is written


@attrs.frozen
class ApiIdempotency:
    """A client's idempotency key bound to the request that first used it."""

    user_id: str
    scope: str  # "create_order" or "refund:<order_id>"
    key: str
    fingerprint: str
    resource_id: UUID
    created_at: datetime


@attrs.frozen
class Guard:
    """The generation a step result may be committed under: (step, attempt, owner)."""

    step_id: UUID
    attempt: int
    owner: str


@attrs.frozen
class Claim:
    """A step an executor has leased: attempt is the generation it runs under."""

    step_id: UUID
    order_id: UUID
    kind: StepKind
    attempt: int
    owner: str
    lease_expires_at: datetime

    @property
    def guard(self) -> Guard:
        return Guard(self.step_id, self.attempt, self.owner)


@attrs.frozen
class Change:
    """Everything one decision writes, applied by the store in one transaction (rule 4).

    `guard`, when set, must still hold in the store (the step is running under that attempt and
    owner) or the whole change is dropped and only a rejection audit entry is written.

    `events` are the last ones `order` numbered (its `event_seq` counts them, each id derived
    from the order and its number), and each `history` entry is the state event of its number
    saying the same: `Draft` builds changes so, and a store may keep the history as those events
    (the PostgreSQL store does, and refuses a change that breaks it).
    """

    order: Order | None = None
    steps: tuple[Step, ...] = ()
    refunds: tuple[Refund, ...] = ()
    history: tuple[HistoryEntry, ...] = ()
    events: tuple[OutboxEvent, ...] = ()
    audit: tuple[AuditEntry, ...] = ()
    idempotency: ApiIdempotency | None = None
    guard: Guard | None = None
    # Written instead of everything else when `guard` no longer holds (rule 6).
    on_reject: AuditEntry | None = None
    # Marks the change as applied once: a second change with this id is a no-op.
    processed_event_id: UUID | None = None

    @property
    def is_empty(self) -> bool:
        return not (
            self.order
            or self.steps
            or self.refunds
            or self.audit
            or self.events
            or self.history
            or self.idempotency
            or self.processed_event_id
        )


@attrs.frozen
class OrderAggregate:
    """An order with its steps and refunds: what every decision reads."""

    order: Order
    steps: tuple[Step, ...] = ()
    refunds: tuple[Refund, ...] = ()

    def step(self, step_id: UUID) -> Step | None:
        return next((s for s in self.steps if s.step_id == step_id), None)

    def steps_of(self, kind: StepKind) -> Iterator[Step]:
        return (s for s in sorted(self.steps, key=lambda s: s.seq) if s.kind is kind)

    def latest(self, kind: StepKind) -> Step | None:
        found = list(self.steps_of(kind))
        return found[-1] if found else None

    def refund(self, refund_id: UUID) -> Refund | None:
        return next((r for r in self.refunds if r.refund_id == refund_id), None)

    def holds(self, guard: Guard) -> bool:
        """Whether the guarded step still runs under the generation a result was computed for
        (what a store checks before it applies a guarded change)."""
        step = self.step(guard.step_id)
        return (
            step is not None
            and step.status is StepStatus.RUNNING
            and step.attempt == guard.attempt
            and step.lease_owner == guard.owner
        )

    @property
    def needs_attention(self) -> bool:
        """Waiting for a person (docs/lifecycle.md), as the order's stamp says: every decision
        stamps the reason its step kinds give (`orderflow_core.steps.registry.attention_reason`)."""
        return self.order.attention_reason is not None

    def with_change(self, change: Change) -> OrderAggregate:
        """The aggregate as it reads after `change` is applied (used by in-memory stores)."""
        steps = {s.step_id: s for s in self.steps}
        steps.update({s.step_id: s for s in change.steps})
        refunds = {r.refund_id: r for r in self.refunds}
        refunds.update({r.refund_id: r for r in change.refunds})
        return OrderAggregate(
            order=change.order or self.order,
            steps=tuple(sorted(steps.values(), key=lambda s: s.seq)),
            refunds=tuple(sorted(refunds.values(), key=lambda r: r.created_at)),
        )
