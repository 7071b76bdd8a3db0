"""Falsifying sequences the stateful machine once found, replayed step by step on every run.

Each case drives the same `OrderflowMachine` rules in the order the search found them, checking
the six rules after each step as the search does, so CI keeps every case found by a deep run.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest

from orderflow_core import Item, StepKind, saga
from orderflow_core.steps import registry
from tests_core import fraud_check
from tests_core.test_stateful import OrderflowMachine, OrderflowMachineV3


def replay(machine: OrderflowMachine, steps: list[Callable[[OrderflowMachine], object]]) -> None:
    """Run `steps` as hypothesis runs rules: the invariants after each one, teardown at the end."""
    try:
        machine.start()
        for step in steps:
            step(machine)
            machine.the_six_rules_hold()
            machine.nothing_raised_unexpectedly()
    finally:
        machine.teardown()


STALE_CHARGE_THEN_RECONCILED: list[Callable[[OrderflowMachine], object]] = [
    lambda m: m.create_order(lines=[Item("sku-a", 1, 100)]),
    lambda m: m.run_executor(executor=0, crash=None),  # reserve
    lambda m: m.stall_executor(executor=0, point="before_call"),  # the charge, frozen
    lambda m: m.advance_clock(seconds=31),  # past the 30 s lease
    lambda m: m.run_executor(executor=0, crash=None),  # takeover: payment in doubt
    lambda m: m.run_executor(executor=0, crash=None),  # status check: no charge under the key
    lambda m: m.resume(0),  # the stale owner wakes up
    lambda m: stale_attempt_reads(m, "not_charged"),  # the case the old oracle misread
]


def charge_attempts(m: OrderflowMachine) -> list[str | None]:
    aggregate = m.world.load(m.world.order_ids[0])
    charge = aggregate.latest(StepKind.CHARGE)
    assert charge is not None
    return [a.outcome for a in charge.attempts]


def stale_attempt_reads(m: OrderflowMachine, outcome: str) -> None:
    assert charge_attempts(m)[0] == outcome


def result_was_dropped(m: OrderflowMachine) -> None:
    assert charge_attempts(m) == [None]  # the charge's result was not written
    assert m.world.load(m.world.order_ids[0]).order.state.value == "paying"


def test_a_stale_charge_attempt_relabelled_by_a_later_reconciliation_is_no_stale_write() -> None:
    """Found by a 20,000-example run: the reconciliation proves the stalled attempt charged
    nothing and relabels it `not_charged`; that write is the reconciler's, not the stale
    owner's, so rule 6 holds."""
    replay(OrderflowMachine(), STALE_CHARGE_THEN_RECONCILED)


STALE_RESULT_AFTER_LEASE_RAN_OUT: list[Callable[[OrderflowMachine], object]] = [
    lambda m: m.create_order(lines=[Item("sku-a", 1, 100)]),
    lambda m: m.run_executor(executor=0, crash=None),  # reserve
    lambda m: m.stall_executor(executor=0, point="after_call"),  # charged, result not committed
    lambda m: m.advance_clock(seconds=31),  # the lease ran out; nobody took over yet
    lambda m: m.resume(0),  # the stale owner tries to commit its result
    result_was_dropped,
]


def test_a_result_whose_lease_ran_out_before_any_takeover_is_not_committed() -> None:
    replay(OrderflowMachine(), STALE_RESULT_AFTER_LEASE_RAN_OUT)


def test_the_machine_catches_a_stale_owner_that_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle has teeth: with the lease-time half of the guard gone (a result is committed
    while the store still shows the step running under its generation, though its lease ran
    out), the replay fails on the stale owner's write."""
    monkeypatch.setattr(
        saga, "guard_holds", lambda aggregate, claim, ctx: aggregate.holds(claim.guard)
    )
    with pytest.raises(AssertionError, match="a stale owner wrote after losing its lease"):
        replay(OrderflowMachine(), STALE_RESULT_AFTER_LEASE_RAN_OUT)


def test_the_machine_catches_a_decision_that_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """The executor survives a decision that raises (the step is left to lease expiry, and a
    later attempt may well succeed), so the rules alone would not notice; the machine does."""

    def broken_handler(*args: object) -> None:
        raise TypeError("a bug in the release handler")

    release = registry.STEPS[StepKind.RELEASE_RESERVATION]
    broken = attrs.evolve(release, on_result=broken_handler)
    monkeypatch.setitem(registry.STEPS, StepKind.RELEASE_RESERVATION, broken)
    steps: list[Callable[[OrderflowMachine], object]] = [
        lambda m: m.create_order(lines=[Item("sku-a", 1, 100)]),
        lambda m: m.world.sim.script("payments", "charge", ["permanent"]),
        lambda m: m.run_executor(executor=0, crash=None),  # reserve
        lambda m: m.run_executor(executor=0, crash=None),  # charge refused: release
        lambda m: m.run_executor(executor=0, crash=None),  # the release's result raises
    ]
    with pytest.raises(AssertionError, match=r"failed unexpectedly"):
        replay(OrderflowMachine(), steps)


def expiry_released_the_unstarted_charge(m: OrderflowMachine) -> None:
    aggregate = m.world.load(m.world.order_ids[0])
    charge = aggregate.latest(StepKind.CHARGE)
    assert charge is not None
    assert charge.status.value == "cancelled"
    assert [a.outcome for a in charge.attempts] == []  # never sent
    assert aggregate.order.state.value in ("releasing", "cancelled")
    assert aggregate.order.reservation_expired
    assert m.world.effects()["charges"] == []


# Version 3 (the fraud check between reserved and paying): the check runs only after the hold
# ran out, so the charge it leads to falls due beside the expiry timer; one claim leases both,
# and the timer's start runs while the charge is leased but not started.
EXPIRY_BESIDE_AN_UNSTARTED_CHARGE: list[Callable[[OrderflowMachine], object]] = [
    lambda m: m.create_order(lines=[Item("sku-a", 1, 1)]),
    lambda m: m.run_executor(executor=0, crash=None),  # reserve; the check and the timer wait
    lambda m: m.advance_clock(seconds=901),  # past the 15-minute hold
    lambda m: m.stall_executor(executor=0, point="before_call"),  # the check: the charge is due
    lambda m: m.run_executor(executor=0, crash=None),  # one claim: the timer and the charge
    expiry_released_the_unstarted_charge,
]


def test_the_expiry_beside_a_leased_unstarted_charge_releases_and_the_charge_sends_nothing(
) -> None:
    """Found by the version-3 machine: the timer saw the charge `running` (leased by the same
    claim, its start not yet run) with the order still `reserved`, took it for a charge in
    flight and asked for reserved -> payment_unknown, an edge no version has. Still `reserved`
    means no charge was sent: the timer stops the leased charge and releases the stock."""
    with fraud_check.registered():
        replay(OrderflowMachineV3(), EXPIRY_BESIDE_AN_UNSTARTED_CHARGE)
