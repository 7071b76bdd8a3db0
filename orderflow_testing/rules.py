"""The six rules of the order process as checks over what any store and any ledger show.

The checks read a `Snapshot` taken through the store port (`load`, `history`, `audit_entries`,
`events`) and the simulated services' ledger, so the same rules judge the in-memory world, the
PostgreSQL world and the real-process chaos run.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Coroutine, Iterable
from typing import Any, Protocol, TypeVar
from uuid import UUID

import attrs

from orderflow_core import TRANSITIONS, OrderAggregate, OrderState, RefundStatus, StepKind
from orderflow_core.model import AuditEntry, HistoryEntry, OutboxEvent
from orderflow_core.ports import OrderStore
from orderflow_core.process import process_for
from orderflow_core.states import StepStatus
from orderflow_core.steps.registry import attention_reason

S = OrderState
AFTER_PAID_FORBIDDEN = {S.CANCELLING, S.CANCELLED, S.RELEASING, S.PAYMENT_FAILED}
NEEDS_SHIP_STEP = {S.PAID, S.SHIPPING, S.SHIPPED, S.SHIPPING_FAILED, S.REFUNDED}
EFFECT_KINDS = ("charges", "reservations", "shipments", "refunds", "messages")
Effects = dict[str, list[dict[str, Any]]]
T = TypeVar("T")


@attrs.frozen
class OrderRecord:
    """One order as the store shows it: the aggregate, its history and its audit log."""

    aggregate: OrderAggregate
    history: list[HistoryEntry]
    audit: list[AuditEntry]


@attrs.frozen
class Snapshot:
    """Every order the test created, the whole event feed, and the services' effects."""

    orders: list[OrderRecord]
    events: list[OutboxEvent]
    effects: Effects


async def read_events(store: OrderStore, page: int = 1000) -> list[OutboxEvent]:
    """The whole outbox feed, paged through the port."""
    found: list[OutboxEvent] = []
    after = 0
    while batch := await store.events(after=after, limit=page):
        found.extend(batch)
        after = batch[-1].seq
    return found


async def take_snapshot(store: OrderStore, order_ids: Iterable[UUID], effects: Effects) -> Snapshot:
    """Read every created order through the port; a created order must be loadable."""
    records = []
    for order_id in order_ids:
        aggregate = await store.load(order_id)
        assert aggregate is not None, f"order {order_id} was created but cannot be loaded"
        history = await store.history(order_id)
        audit = await store.audit_entries(order_id)
        records.append(OrderRecord(aggregate, history, audit))
    return Snapshot(records, await read_events(store), effects)


def check_snapshot(snap: Snapshot, *, worker_prefix: str = "worker-") -> None:
    """Every rule, for every order, plus the feed as a whole."""
    events_of: dict[UUID, list[OutboxEvent]] = {}
    for event in snap.events:
        events_of.setdefault(event.order_id, []).append(event)
    for record in snap.orders:
        order_id = str(record.aggregate.order.order_id)
        mine = {
            kind: [e for e in snap.effects.get(kind, []) if e["order_id"] == order_id]
            for kind in EFFECT_KINDS
        }
        one_effect_per_key(record.aggregate, mine)
        no_release_while_money_in_doubt(record.aggregate, mine)
        nothing_automatic_after_paid(record, mine)
        events = events_of.get(record.aggregate.order.order_id, [])
        state_and_steps_agree(record, events)
        compensations_audited(record, worker_prefix)
        attempts_are_generations(record.aggregate)
        transitions_only_from_the_table(record.history, record.aggregate.order.process_version)
        the_attention_stamp_is_current(record, events)
    the_feed_is_complete_and_unique(snap)


def one_effect_per_key(aggregate: OrderAggregate, mine: Effects) -> None:
    """Rule 1: one key never makes a second charge, reservation, shipment or refund."""
    for kind in EFFECT_KINDS:
        keys = Counter(e["idempotency_key"] for e in mine[kind])
        assert all(n == 1 for n in keys.values()), (kind, keys)
    assert len(list(aggregate.steps_of(StepKind.CHARGE))) <= 1
    assert len(mine["charges"]) <= 1, mine["charges"]
    assert len(mine["reservations"]) <= 1
    assert len(mine["shipments"]) <= 1
    # A customer is told once, and only once the carrier confirmed, by a version that says so.
    assert len(mine["messages"]) <= 1, mine["messages"]
    if mine["messages"]:
        assert aggregate.order.state is S.SHIPPED, aggregate.order.state
        then = process_for(aggregate.order.process_version).then.get(StepKind.SHIP, ())
        assert StepKind.NOTIFY_CUSTOMER in then, aggregate.order.process_version
    refunded = sum(r["amount_minor"] for r in mine["refunds"])
    assert refunded <= aggregate.order.total_minor


def no_release_while_money_in_doubt(aggregate: OrderAggregate, mine: Effects) -> None:
    """Rule 2: stock is given back only once the money is settled: never taken, or given back
    in full by refunds of an order that ended `refunded` — never while a charge may have taken
    it."""
    released = any(r["status"] == "released" for r in mine["reservations"])
    if not released:
        return
    assert not [c for c in mine["charges"] if c["status"] == "pending"], mine["charges"]
    assert aggregate.order.payment_status not in ("unknown", "in_flight")
    taken = [c for c in mine["charges"] if c["status"] == "succeeded"]
    if not taken and aggregate.order.payment_status != "succeeded":
        return
    given_back = sum(r["amount_minor"] for r in mine["refunds"])
    assert aggregate.order.state is S.REFUNDED, ("released with money taken", taken)
    assert given_back >= sum(c["amount_minor"] for c in taken), ("released", taken, given_back)


def nothing_automatic_after_paid(record: OrderRecord, mine: Effects) -> None:
    """Rule 3: after paid, nothing cancels or refunds by itself; refunds are their own thing."""
    aggregate, history = record.aggregate, record.history
    paid_at = next((i for i, h in enumerate(history) if h.to_state is S.PAID), None)
    if paid_at is not None:
        later = {h.to_state for h in history[paid_at:]}
        assert not later & AFTER_PAID_FORBIDDEN, later
    refund_keys = {s.idempotency_key for s in aggregate.steps_of(StepKind.REFUND)}
    assert {r["idempotency_key"] for r in mine["refunds"]} <= refund_keys
    for refund in aggregate.refunds:
        assert refund.requested_by == "order_operator"
    if aggregate.order.state is S.REFUNDED:
        done = sum(r.amount_minor for r in aggregate.refunds if r.status is RefundStatus.SUCCEEDED)
        assert done == aggregate.order.total_minor


STATE_NAMES = frozenset(s.value for s in OrderState)


def state_and_steps_agree(record: OrderRecord, events: list[OutboxEvent]) -> None:
    """Rule 4: a state change and the steps and events it implies are committed together."""
    order, history = record.aggregate.order, record.history
    kinds = {s.kind for s in record.aggregate.steps}
    if order.state is S.RESERVED:
        # What the version's sequence puts after the reserve step (the charge, unless a
        # version inserts a step before it).
        follows = process_for(order.process_version).then.get(StepKind.RESERVE, ())
        assert kinds & set(follows), (follows, kinds)
    if order.state is S.PAYING:
        assert StepKind.CHARGE in kinds
    if order.state in NEEDS_SHIP_STEP:
        assert StepKind.SHIP in kinds
        assert order.payment_status == "succeeded"
    if order.state in (S.RELEASING, S.CANCELLING):
        assert StepKind.RELEASE_RESERVATION in kinds
    transitions = [e for e in events if e.type.removeprefix("order.") in STATE_NAMES]
    assert len(transitions) == len(history), (len(transitions), len(history))
    assert len(events) == order.event_seq, (len(events), order.event_seq)
    # No double write: a history row's seq is its event's number, so each appears once, in order.
    seqs = [h.seq for h in history]
    assert seqs == sorted(set(seqs)), seqs
    assert {h.seq for h in history} <= {i + 1 for i in range(order.event_seq)}
    assert history[-1].to_state is order.state


def the_attention_stamp_is_current(record: OrderRecord, events: list[OutboxEvent]) -> None:
    """The order carries the attention reason its aggregate implies, and the change that made
    it wait for that reason announced it with an `order.needs_attention` event."""
    order = record.aggregate.order
    reason = attention_reason(record.aggregate)
    assert order.attention_reason == reason, (order.attention_reason, reason, order.state)
    assert (order.attention_since is None) == (reason is None), order.attention_since
    if reason is not None:
        announced = [e for e in events if e.type == "order.needs_attention"]
        assert announced, "an order waits for a person but no event said so"
        assert announced[-1].payload["reason"] == reason.value, announced[-1].payload


def compensations_audited(record: OrderRecord, worker_prefix: str = "worker-") -> None:
    """Rule 5: every compensation and manual decision is in the audit log."""
    aggregate, audit = record.aggregate, record.audit
    for step in aggregate.steps_of(StepKind.RELEASE_RESERVATION):
        if step.status is StepStatus.SUCCEEDED:
            assert any(
                a.action == "compensation.release_reservation"
                and a.step_id == step.step_id
                and a.actor.startswith(worker_prefix)
                for a in audit
            ), (step, audit)
    for refund in aggregate.refunds:
        assert any(a.action == "manual.refund" and a.step_id == refund.step_id for a in audit)
        if refund.status in (RefundStatus.SUCCEEDED, RefundStatus.FAILED):
            assert any(
                a.action == "compensation.refund"
                and a.outcome == refund.status.value
                and a.step_id == refund.step_id
                for a in audit
            )


def attempts_are_generations(aggregate: OrderAggregate) -> None:
    """Rule 6 (shape): attempts are numbered 1, 2, 3… per step, never reused."""
    for step in aggregate.steps:
        numbers = [a.attempt for a in step.attempts]
        assert numbers == sorted(set(numbers)), numbers
        assert all(1 <= n <= step.attempt for n in numbers)


def transitions_only_from_the_table(history: list[HistoryEntry], version: int) -> None:
    """Every recorded state change is an edge of the order's process version's table."""
    assert history, "an order without history"
    assert history[0].from_state is None
    assert history[0].to_state is S.CREATED
    for before, entry in itertools.pairwise(history):
        assert entry.from_state is before.to_state, (before, entry)
        assert (entry.from_state, entry.to_state) in TRANSITIONS[version], entry


def the_feed_is_complete_and_unique(snap: Snapshot) -> None:
    """The outbox feed: unique event ids, increasing seq, one transition event per history row."""
    ids = Counter(e.event_id for e in snap.events)
    assert all(n == 1 for n in ids.values()), [i for i, n in ids.items() if n > 1]
    seqs = [e.seq for e in snap.events]
    assert seqs == sorted(set(seqs)), "event seq not strictly increasing"
    known = {r.aggregate.order.order_id for r in snap.orders}
    assert {e.order_id for e in snap.events} <= known, "events of an order nobody created"


class _WorldLike(Protocol):
    store: OrderStore
    order_ids: list[UUID]

    def run(self, coro: Coroutine[Any, Any, T]) -> T: ...

    def effects(self) -> Effects: ...

    def publish(self) -> int: ...


def check_all_rules(w: _WorldLike) -> None:
    """Publish the outbox, snapshot a world (in memory or on PostgreSQL) through its store,
    and check every rule."""
    w.publish()
    check_snapshot(w.run(take_snapshot(w.store, w.order_ids, w.effects())))
