"""The six rules of CONTRACT §1 as checks over a whole in-memory world."""

from __future__ import annotations

from collections import Counter
from typing import Any

from orderflow_core import TRANSITIONS, OrderAggregate, OrderState, RefundStatus, StepKind
from orderflow_core.states import StepStatus
from tests_core.world import World

S = OrderState
AFTER_PAID_FORBIDDEN = {S.CANCELLING, S.CANCELLED, S.RELEASING, S.PAYMENT_FAILED}
NEEDS_SHIP_STEP = {S.PAID, S.SHIPPING, S.SHIPPED, S.SHIPPING_FAILED, S.REFUNDED}


def check_all_rules(w: World) -> None:
    effects = w.sim.ledger()["effects"]
    for aggregate in w.store.aggregates.values():
        order_id = str(aggregate.order.order_id)
        mine = {
            kind: [e for e in rows if e["order_id"] == order_id] for kind, rows in effects.items()
        }
        one_effect_per_key(aggregate, mine)
        no_release_while_money_in_doubt(aggregate, mine)
        nothing_automatic_after_paid(w, aggregate, mine)
        state_and_steps_agree(w, aggregate)
        compensations_audited(w, aggregate)
        attempts_are_generations(aggregate)
    transitions_only_from_the_table(w)


def one_effect_per_key(aggregate: OrderAggregate, mine: dict[str, list[dict[str, Any]]]) -> None:
    """Rule 1: one key never makes a second charge, reservation, shipment or refund."""
    for kind in ("charges", "reservations", "shipments", "refunds"):
        keys = Counter(e["idempotency_key"] for e in mine[kind])
        assert all(n == 1 for n in keys.values()), (kind, keys)
    assert len(list(aggregate.steps_of(StepKind.CHARGE))) <= 1
    assert len(mine["charges"]) <= 1, mine["charges"]
    assert len(mine["reservations"]) <= 1
    assert len(mine["shipments"]) <= 1
    refunded = sum(r["amount_minor"] for r in mine["refunds"])
    assert refunded <= aggregate.order.total_minor


def no_release_while_money_in_doubt(
    aggregate: OrderAggregate, mine: dict[str, list[dict[str, Any]]]
) -> None:
    """Rule 2: stock is never given back while a charge may have taken the money."""
    released = any(r["status"] == "released" for r in mine["reservations"])
    if not released:
        return
    money = [c for c in mine["charges"] if c["status"] in ("succeeded", "pending")]
    assert not money, ("released with money taken or pending", money)
    assert aggregate.order.payment_status not in ("unknown", "in_flight", "succeeded")


def nothing_automatic_after_paid(
    w: World, aggregate: OrderAggregate, mine: dict[str, list[dict[str, Any]]]
) -> None:
    """Rule 3: after paid, nothing cancels or refunds by itself; refunds are their own thing."""
    history = w.store.history_log.get(aggregate.order.order_id, [])
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


def state_and_steps_agree(w: World, aggregate: OrderAggregate) -> None:
    """Rule 4: a state change and the steps and events it implies are committed together."""
    order = aggregate.order
    kinds = {s.kind for s in aggregate.steps}
    if order.state in (S.RESERVED, S.PAYING):
        assert StepKind.CHARGE in kinds
    if order.state in NEEDS_SHIP_STEP:
        assert StepKind.SHIP in kinds
        assert order.payment_status == "succeeded"
    if order.state in (S.RELEASING, S.CANCELLING):
        assert StepKind.RELEASE_RESERVATION in kinds
    history = w.store.history_log.get(order.order_id, [])
    events = [e for e in w.store.outbox if e.order_id == order.order_id]
    transitions = [e for e in events if e.type.startswith("order.")]
    assert len(transitions) == len(history)
    assert len(events) == order.event_seq
    assert history[-1].to_state is order.state


def compensations_audited(w: World, aggregate: OrderAggregate) -> None:
    """Rule 5: every compensation and manual decision is in the audit log."""
    audit = [a for a in w.store.audit_log if a.order_id == aggregate.order.order_id]
    for step in aggregate.steps_of(StepKind.RELEASE_RESERVATION):
        if step.status is StepStatus.SUCCEEDED:
            assert any(
                a.action == "compensation.release_reservation"
                and a.step_id == step.step_id
                and a.actor.startswith("worker-")
                for a in audit
            )
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


def transitions_only_from_the_table(w: World) -> None:
    for history in w.store.history_log.values():
        assert history[0].from_state is None
        assert history[0].to_state is S.CREATED
        for entry in history[1:]:
            assert entry.from_state is not None
            assert (entry.from_state, entry.to_state) in TRANSITIONS[1], entry
