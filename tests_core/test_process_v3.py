"""A step inserted between `reserved` and `paying` as data: the test-only process version 3 of
`tests_core/fraud_check.py` (its own step kind and a sequence that puts it after the reserve
step), run through the real service, saga and executors; versions 1 and 2 are untouched by it.

It is added in 0 product files: the package learns of it only through `registry.add` and
`process.add` (the last test reads the product packages to prove none names it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from orderflow_core import Item, OrderState, StepKind, process, saga
from orderflow_core.process import EDGES_V1, PROCESSES, THEN_V1, Process, process_for
from orderflow_core.steps.registry import STEPS, current_step, services_needed
from tests_core import fraud_check
from tests_core.world import CUSTOMER, OPERATOR, World

S = OrderState
ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("orderflow", "orderflow_core", "orderflow_http", "orderflow_pg", "orderflow_mocks",
           "orderflow_testing", "orderflow_nats")
SMALL = Item("sku-a", 2, 1500)  # 3,000: passes the check
LARGE = Item("sku-b", 3, 9000)  # 27,000: above the limit


@pytest.fixture
def world() -> Iterator[World]:
    with fraud_check.registered():
        w = World(process_version=fraud_check.VERSION)
        try:
            yield w
        finally:
            w.close()


def _kinds(w: World, order_id: object) -> list[str]:
    aggregate = w.load(order_id)  # type: ignore[arg-type]
    return [s.kind.value for s in sorted(aggregate.steps, key=lambda s: s.seq)]


def test_an_order_that_passes_the_check_is_charged_after_it_and_shipped(world: World) -> None:
    order_id = world.create(SMALL)
    world.step()  # the reserve step: reserved, and the check (not the charge) is next
    assert world.state(order_id) is S.RESERVED
    step = current_step(world.load(order_id))
    assert step is not None
    assert step.kind is fraud_check.FRAUD_CHECK
    assert world.charges(order_id) == []
    world.settle()
    assert world.state(order_id) is S.SHIPPED
    assert _kinds(world, order_id) == [
        "reserve", "fraud_check", "expire_reservation", "charge", "ship", "notify_customer",
    ]
    visited = [to for _, to in world.states_visited(order_id)]
    assert visited == ["created", "reserving", "reserved", "paying", "paid", "shipping", "shipped"]


def test_a_suspected_order_is_never_charged_and_its_stock_is_released(world: World) -> None:
    order_id = world.create(LARGE)
    world.settle()
    assert world.state(order_id) is S.PAYMENT_FAILED
    assert world.charges(order_id) == []
    released = [r for r in world.effects()["reservations"] if r["status"] == "released"]
    assert len(released) == 1
    aggregate = world.load(order_id)
    check = aggregate.latest(fraud_check.FRAUD_CHECK)
    assert check is not None
    assert check.last_error == fraud_check.SUSPECTED
    assert not aggregate.needs_attention


def test_the_order_may_be_cancelled_while_the_check_waits_as_its_facts_say(world: World) -> None:
    order_id = world.create(SMALL)
    world.step()
    view = world.run(world.service.get_order(CUSTOMER, order_id))
    assert view.allowed_actions == ("cancel",)
    operator_view = world.run(world.service.get_order(OPERATOR, order_id))
    assert operator_view.allowed_actions == ()
    _, result = world.run(world.service.cancel(CUSTOMER, order_id))
    assert result == "cancelling"
    world.settle()
    assert world.state(order_id) is S.CANCELLED
    assert world.charges(order_id) == []
    check = world.load(order_id).latest(fraud_check.FRAUD_CHECK)
    assert check is not None
    assert check.status.value == "cancelled"


def test_the_version_owns_the_sequence_and_needs_no_new_service() -> None:
    with fraud_check.registered():
        v3 = process_for(fraud_check.VERSION)
        assert v3.then[StepKind.RESERVE] == (fraud_check.FRAUD_CHECK,)
        assert v3.then[fraud_check.FRAUD_CHECK] == (StepKind.CHARGE,)
        assert services_needed(3) == services_needed(2)
    # Once the block ends the package is as it was: versions 1 and 2 and their kinds only.
    assert set(PROCESSES) == {1, 2}
    assert fraud_check.FRAUD_CHECK not in STEPS
    assert process_for(2).then[StepKind.RESERVE] == (StepKind.CHARGE,)


def test_which_successes_end_the_sequence_follows_each_versions_then() -> None:
    """`success_ends_sequence` (the executor frees a slot before such a result's commit): true
    only for a kind on the version's sequence with no mainline kind after it."""
    ends = saga.success_ends_sequence
    assert [ends(1, k) for k in (StepKind.RESERVE, StepKind.CHARGE, StepKind.SHIP)] == [
        False, False, True]
    assert ends(2, StepKind.SHIP)  # the notification after it runs beside the sequence
    assert ends(2, StepKind.NOTIFY_CUSTOMER)
    assert not ends(1, StepKind.RECONCILE_PAYMENT)  # off the sequence: its success ships
    assert not ends(1, StepKind.REFUND)
    with fraud_check.registered():
        assert not ends(fraud_check.VERSION, fraud_check.FRAUD_CHECK)  # the charge follows
        assert not ends(fraud_check.VERSION, StepKind.RESERVE)
        assert ends(fraud_check.VERSION, StepKind.SHIP)


def test_version_3_touches_no_product_file() -> None:
    naming = [
        path.relative_to(ROOT)
        for package in PRODUCT
        for path in (ROOT / package).rglob("*")
        if path.suffix in {".py", ".js", ".html", ".sql", ".css"}
        and "fraud" in path.read_text(encoding="utf-8")
    ]
    assert naming == []


def test_a_version_names_only_kinds_it_runs_and_is_defined_once() -> None:
    with pytest.raises(ValueError, match="sequences kinds it does not run"):
        Process(9, "x", EDGES_V1, frozenset({StepKind.RESERVE}), then=THEN_V1)
    with pytest.raises(ValueError, match="already defined"):
        process.add(attrs.evolve(process_for(2), summary="another version 2"))
    with pytest.raises(ValueError, match="package's own"):
        process.remove(1)
    assert set(PROCESSES) == {1, 2}
