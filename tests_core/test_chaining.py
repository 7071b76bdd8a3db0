"""An executor that chains goes straight on with the step a result makes due, its intent
committed together with that result, and still keeps every rule."""

from __future__ import annotations

import logging

import attrs
import pytest

from orderflow_core import OrderState, StepKind, StepStatus
from orderflow_core.errors import StoreUnavailable
from tests_core.reach import Crash
from tests_core.world import World


def chaining_world(**kwargs: object) -> World:
    w = World(**kwargs)  # type: ignore[arg-type]
    for executor in w.executors:
        executor.timing = attrs.evolve(executor.timing, chain_steps=True)
    return w


def test_one_claim_carries_an_order_from_reserve_to_shipped() -> None:
    w = chaining_world(process_version=1)
    try:
        order_id = w.create()
        assert w.step() == 1
        assert w.state(order_id) is OrderState.SHIPPED
        steps = {s.kind: s for s in w.load(order_id).steps}
        for kind in (StepKind.RESERVE, StepKind.CHARGE, StepKind.SHIP):
            assert steps[kind].status is StepStatus.SUCCEEDED
            assert [a.attempt for a in steps[kind].attempts] == [1]
        assert w.step() == 0
    finally:
        w.close()


def test_version_2_notifies_in_a_claim_of_its_own_after_the_chain_reached_shipped() -> None:
    w = chaining_world(process_version=2)
    try:
        order_id = w.create()
        assert w.step() == 1
        assert w.state(order_id) is OrderState.SHIPPED
        [notify] = w.load(order_id).steps_of(StepKind.NOTIFY_CUSTOMER)
        assert notify.status is StepStatus.PENDING  # not chained: it carries the order nowhere
        assert w.step() == 1
        [notify] = w.load(order_id).steps_of(StepKind.NOTIFY_CUSTOMER)
        assert notify.status is StepStatus.SUCCEEDED
        assert w.state(order_id) is OrderState.SHIPPED
        assert w.step() == 0
    finally:
        w.close()


def test_each_chained_intent_is_committed_with_the_result_before_its_call() -> None:
    seen: list[tuple[str, StepKind, StepStatus]] = []
    w = chaining_world()

    async def checkpoint(name: str, claim: object) -> None:
        aggregate = await w.store.load(claim.order_id)  # type: ignore[attr-defined]
        step = aggregate.step(claim.step_id)  # type: ignore[union-attr]
        seen.append((name, step.kind, step.status))
        opened = [a for a in step.attempts if a.attempt == claim.attempt]  # type: ignore[attr-defined]
        assert opened, "the intent of this attempt is in the store"

    for executor in w.executors:
        executor._checkpoint = checkpoint
    try:
        w.create()
        w.step()
        before_calls = [kind for name, kind, _ in seen if name == "before_call"]
        assert before_calls == [StepKind.RESERVE, StepKind.CHARGE, StepKind.SHIP]
        assert all(
            status is StepStatus.RUNNING for name, _, status in seen if name == "before_call"
        )
    finally:
        w.close()


def test_a_crash_before_a_chained_call_leaves_the_step_to_another_executor() -> None:
    async def crash_before_charge(name: str, claim: object) -> None:
        if name == "before_call" and claim.kind is StepKind.CHARGE:  # type: ignore[attr-defined]
            raise Crash("before the chained charge")

    w = chaining_world(executors=2)
    w.executors[0]._checkpoint = crash_before_charge
    try:
        order_id = w.create()
        w.step(0)
        assert w.state(order_id) is OrderState.PAYING
        assert w.step(1) == 0, "the lease still holds"
        w.clock.advance(w.timing.lease_s + 1)
        w.step(1)
        w.settle()
        assert w.state(order_id) is OrderState.SHIPPED
        assert len(w.charges(order_id)) == 1
    finally:
        w.close()


def test_the_lease_expiry_warning_names_the_chained_step_abandoned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A chain that fails at its charge logs the charge (step, kind, attempt, order), not the
    reserve the chain was claimed for: an operator searching the logs for a charge in doubt
    finds it by its step id."""
    step_ids: dict[StepKind, object] = {}

    async def store_gone_at_charge(name: str, claim: object) -> None:
        step_ids[claim.kind] = claim.step_id  # type: ignore[attr-defined]
        if name == "before_call" and claim.kind is StepKind.CHARGE:  # type: ignore[attr-defined]
            raise StoreUnavailable("the database went away before the chained charge")

    w = chaining_world()
    w.executors[0]._checkpoint = store_gone_at_charge
    try:
        order_id = w.create()
        with caplog.at_level(logging.WARNING, logger="orderflow"):
            w.step(0)
        lines = [r.getMessage() for r in caplog.records]
        [line] = [text for text in lines if "left to lease expiry" in text]
        assert str(step_ids[StepKind.CHARGE]) in line
        assert "(charge)" in line
        assert str(order_id) in line
        assert str(step_ids[StepKind.RESERVE]) not in line
    finally:
        w.close()
