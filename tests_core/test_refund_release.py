"""A refund that ends an undeliverable order also gives its stock back — a compensation,
audited, idempotent under the reserve call's key — and only once the money is settled."""

from __future__ import annotations

from collections.abc import Iterator
from uuid import UUID

import pytest

from orderflow_core import OrderState, StepKind, StepStatus
from tests_core.rules import check_snapshot, take_snapshot
from tests_core.world import OPERATOR, World

S = OrderState


@pytest.fixture
def world() -> Iterator[World]:
    w = World()
    yield w
    w.close()


def _undeliverable(w: World) -> UUID:
    w.sim.script("shipping", "ship", ["permanent"])
    order_id = w.create()
    w.settle()
    assert w.state(order_id) is S.SHIPPING_FAILED
    return order_id


def _refund(w: World, order_id: UUID, amount: int | None = None, key: str = "refund-1") -> None:
    w.run(w.service.request_refund(OPERATOR, order_id, key, amount, "parcel lost"))


def _reservation(w: World, order_id: UUID) -> dict[str, object]:
    [reservation] = w.sim.ledger(order_id=str(order_id))["effects"]["reservations"]
    return reservation  # type: ignore[no-any-return]


def _check_rules(w: World) -> None:
    w.publish()
    check_snapshot(w.run(take_snapshot(w.store, w.order_ids, w.effects())))


def test_a_full_refund_of_an_undeliverable_order_releases_its_reservation(world: World) -> None:
    order_id = _undeliverable(world)
    _refund(world, order_id)
    world.settle()
    aggregate = world.load(order_id)
    assert aggregate.order.state is S.REFUNDED
    assert aggregate.order.reservation_status == "released"
    reserve = aggregate.latest(StepKind.RESERVE)
    [release] = aggregate.steps_of(StepKind.RELEASE_RESERVATION)
    assert release.status is StepStatus.SUCCEEDED
    assert reserve is not None
    # The warehouse released the reservation made under the reserve call's key.
    assert _reservation(world, order_id) == {
        **_reservation(world, order_id),
        "idempotency_key": reserve.idempotency_key,
        "status": "released",
    }
    audit = world.run(world.store.audit_entries(order_id))
    releases = [(a.outcome, a.details.get("reason")) for a in audit if a.step_id == release.step_id]
    assert releases == [("requested", "refunded"), ("released", None)]
    # The order stays `refunded`: the release changes the stock, not the state.
    assert world.states_visited(order_id)[-1] == ("shipping_failed", "refunded")
    _check_rules(world)


def test_a_release_after_a_refund_is_retried_under_the_same_key_and_applied_once(
    world: World,
) -> None:
    order_id = _undeliverable(world)
    world.sim.script("warehouse", "release", ["transient", "lost_response"])
    _refund(world, order_id)
    world.settle()
    aggregate = world.load(order_id)
    [release] = aggregate.steps_of(StepKind.RELEASE_RESERVATION)
    assert [a.attempt for a in release.attempts] == [1, 2, 3]
    assert release.status is StepStatus.SUCCEEDED
    calls = [
        c for c in world.sim.ledger(order_id=str(order_id))["calls"] if c["operation"] == "release"
    ]
    assert {c["idempotency_key"] for c in calls} == {release.idempotency_key}
    assert _reservation(world, order_id)["status"] == "released"
    assert aggregate.order.state is S.REFUNDED
    _check_rules(world)


def test_a_partial_refund_keeps_the_stock_held(world: World) -> None:
    order_id = _undeliverable(world)
    _refund(world, order_id, amount=100)
    world.settle()
    aggregate = world.load(order_id)
    assert aggregate.order.state is S.SHIPPING_FAILED  # a person may still retry shipping
    assert aggregate.order.reservation_status == "held"
    assert not list(aggregate.steps_of(StepKind.RELEASE_RESERVATION))
    assert _reservation(world, order_id)["status"] == "held"


def test_the_stock_goes_back_only_when_the_last_refund_settles_the_money(world: World) -> None:
    order_id = _undeliverable(world)
    total = world.load(order_id).order.total_minor
    world.sim.script("payments", "refund", ["lost_response", "timeout"])
    _refund(world, order_id, amount=100, key="part-1")
    _refund(world, order_id, key="rest")
    for _ in range(3):  # the refunds' outcomes are unknown: money is in doubt, stock held
        world.step()
        assert world.load(order_id).order.reservation_status == "held"
        assert _reservation(world, order_id)["status"] == "held"
    world.settle()
    aggregate = world.load(order_id)
    assert sum(r.amount_minor for r in aggregate.refunds) == total
    assert aggregate.order.state is S.REFUNDED
    assert _reservation(world, order_id)["status"] == "released"
    _check_rules(world)


def test_a_refused_refund_releases_nothing(world: World) -> None:
    order_id = _undeliverable(world)
    world.sim.script("payments", "refund", ["permanent"])
    _refund(world, order_id)
    world.settle()
    aggregate = world.load(order_id)
    assert aggregate.order.state is S.SHIPPING_FAILED
    assert aggregate.order.reservation_status == "held"
    assert _reservation(world, order_id)["status"] == "held"


def test_a_refund_of_a_shipped_order_leaves_the_reservation_alone(world: World) -> None:
    order_id = world.create()
    world.settle()
    _refund(world, order_id)
    world.settle()
    aggregate = world.load(order_id)
    assert aggregate.order.state is S.SHIPPED
    assert not list(aggregate.steps_of(StepKind.RELEASE_RESERVATION))
    assert _reservation(world, order_id)["status"] == "held"
