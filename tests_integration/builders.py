"""Small builders of orders, steps and changes for the store tests (the saga is not needed)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from uuid import UUID

import attrs

from orderflow_core import ids
from orderflow_core.model import (
    ApiIdempotency,
    Attempt,
    AuditEntry,
    Change,
    Claim,
    Guard,
    HistoryEntry,
    Item,
    Order,
    OutboxEvent,
    Step,
)
from orderflow_core.states import OrderState, StepKind, StepStatus
from orderflow_core.vocabulary import state_event

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """T0 plus some seconds: every time in these tests is a parameter, never the wall clock."""
    return T0 + timedelta(seconds=seconds)


def new_order(*, customer: str = "alice", created: datetime = T0) -> Order:
    items = (Item("sku-1", 2, 1500), Item("sku-2", 1, 999))
    return Order(
        order_id=uuid.uuid4(),
        customer_id=customer,
        items=items,
        total_minor=sum(i.total_minor for i in items),
        currency="RUB",
        process_version=1,
        state=OrderState.CREATED,
        created_at=created,
        updated_at=created,
        event_seq=1,  # its `order.created`
    )


def new_step(
    order: Order,
    *,
    kind: StepKind = StepKind.RESERVE,
    seq: int = 1,
    status: StepStatus = StepStatus.PENDING,
    due: datetime | None = T0,
) -> Step:
    return Step(
        step_id=uuid.uuid4(),
        order_id=order.order_id,
        kind=kind,
        seq=seq,
        status=status,
        idempotency_key=f"{order.order_id}:{kind.value}:{seq}",
        created_at=order.created_at,
        next_attempt_at=due,
    )


def event(order: Order, kind: str) -> OutboxEvent:
    """`order`'s newest event (number `event_seq`): its id is derived from the order and that
    number, as the saga's are and as the store checks."""
    return OutboxEvent(
        event_id=ids.event_id(order.order_id, order.event_seq),
        order_id=order.order_id,
        type=kind,
        payload={"order_id": str(order.order_id), "state": order.state.value},
        created_at=order.updated_at,
    )


def transition(
    before: OrderState | None, order: Order, *, actor: str, reason: str
) -> tuple[HistoryEntry, OutboxEvent]:
    """The history entry of `order`'s newest event, a move from `before` to its state, and that
    event saying the same (as `Draft.move` writes them)."""
    entry = HistoryEntry(
        order.order_id, order.event_seq, before, order.state, order.updated_at, actor, reason
    )
    payload = {"order_id": str(order.order_id), **entry.event_payload()}
    return entry, OutboxEvent(
        ids.event_id(order.order_id, order.event_seq),
        order.order_id,
        state_event(order.state),
        payload,
        order.updated_at,
    )


def audit(order: Order, action: str, *, step_id: UUID | None = None) -> AuditEntry:
    return AuditEntry(
        order_id=order.order_id,
        at=order.updated_at,
        actor="system",
        action=action,
        outcome="ok",
        step_id=step_id,
        details={"why": action},
    )


def idempotency(order: Order, key: str = "key-1") -> ApiIdempotency:
    return ApiIdempotency(
        user_id=order.customer_id,
        scope="create_order",
        key=key,
        fingerprint="sha256:abc",
        resource_id=order.order_id,
        created_at=order.created_at,
    )


def creation(order: Order, *, key: str | None = "key-1", due: datetime | None = T0) -> Change:
    """What `POST /orders` writes: the order, its reserve step, history, event, audit, key."""
    step = new_step(order, due=due)
    entry, created = transition(None, order, actor=order.customer_id, reason="api")
    return Change(
        order=order,
        steps=(step,),
        history=(entry,),
        events=(created,),
        audit=(audit(order, "create", step_id=step.step_id),),
        idempotency=idempotency(order, key) if key else None,
    )


def step_result(
    step: Step, claim: Claim, *, worker: str, finished: datetime, outcome: str = "succeeded"
) -> Step:
    """The step as an executor would commit it after its call returned."""
    attempt = Attempt(claim.attempt, claim.lease_expires_at, worker, finished, outcome)
    return attrs.evolve(
        step,
        status=StepStatus.SUCCEEDED,
        attempt=claim.attempt,
        lease_owner=None,
        lease_expires_at=None,
        next_attempt_at=None,
        result={"reservation_id": "r-1", "by": worker},
        attempts=(*step.attempts, attempt),
    )


def reserved_change(order: Order, step: Step, claim: Claim, *, worker: str) -> Change:
    """The transition a finished reserve step commits, fenced by its claim's generation."""
    moved = attrs.evolve(
        order, state=OrderState.RESERVED, updated_at=at(5), event_seq=order.event_seq + 1
    )
    charge = new_step(moved, kind=StepKind.CHARGE, seq=2)
    entry, reserved = transition(order.state, moved, actor=worker, reason="reserved")
    return Change(
        order=moved,
        steps=(step_result(step, claim, worker=worker, finished=at(5)), charge),
        history=(entry,),
        events=(reserved,),
        audit=(audit(moved, "reserve", step_id=step.step_id),),
        guard=Guard(claim.step_id, claim.attempt, claim.owner),
        on_reject=AuditEntry(
            order_id=order.order_id,
            at=at(5),
            actor=worker,
            action="stale_result_rejected",
            outcome="rejected",
            step_id=step.step_id,
            details={"attempt": claim.attempt},
        ),
    )
