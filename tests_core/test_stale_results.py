"""A result that comes back after its lease ran out is not stored, whether or not another
executor took the step over meanwhile; either way the rejection is audited and logged."""

from __future__ import annotations

import logging

import pytest

from orderflow_core import OrderState, StepStatus
from orderflow_core.model import Claim
from tests_core.world import World


def test_a_result_after_its_lease_ran_out_is_audited_and_logged_not_stored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world: list[World] = []

    async def late(name: str, claim: Claim) -> None:
        if name == "after_call" and claim.attempt == 1:  # the first answer comes too late
            w = world[0]
            w.clock.advance(w.timing.lease_s + 1)

    w = World(checkpoint=late)
    world.append(w)
    try:
        order_id = w.create()
        with caplog.at_level(logging.WARNING, logger="orderflow.executor"):
            assert w.step() == 1
        aggregate = w.load(order_id)
        assert aggregate.order.state is OrderState.RESERVING
        [step] = aggregate.steps
        # Not stored: the step still runs under attempt 1 (nobody re-claimed it yet) ...
        assert (step.status, step.attempt) == (StepStatus.RUNNING, 1)
        assert [a.outcome for a in step.attempts] == [None]
        # ... but the rejection is in the audit log and in the log.
        last = w.run(w.store.audit_entries(order_id))[-1]
        assert (last.action, last.outcome, last.step_id) == (
            "step.result_rejected",
            "lease_expired",
            step.step_id,
        )
        assert last.details == {"attempt": 1}
        assert last.actor == w.executors[0].worker_id
        assert any(
            "rejected (lease_expired)" in r.getMessage() and str(step.step_id) in r.getMessage()
            for r in caplog.records
        ), [r.getMessage() for r in caplog.records]
        # The step is taken over after all and the order goes on.
        w.settle()
        assert w.state(order_id) is OrderState.SHIPPED
    finally:
        w.close()
