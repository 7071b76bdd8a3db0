"""What the saga decides about money, given an order's recorded history: when a charge may be
sent (again), what a reservation expiry does while a charge is in doubt or in flight, what a
status check's answer does, and when a stale result is dropped.

Orders are brought to a state by a real in-memory world; the case under test is then put to
the saga's two decisions (`decide_start`, `decide_result`) exactly as a store would, and the
order as it reads after the change is what the tests look at.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import attrs
import pytest

from orderflow_core import (
    Broken,
    Claim,
    Context,
    NotRetryable,
    OrderAggregate,
    OrderState,
    Outcome,
    Refused,
    Step,
    StepKind,
    StepStatus,
    Succeeded,
    Transient,
    UnknownOutcome,
    commands,
    saga,
)
from orderflow_core.steps.definition import CallPlan
from orderflow_core.steps.payment import ChargeRequest, StatusRequest
from orderflow_core.steps.release import ReleaseRequest
from tests_core.world import OPERATOR, World

S = OrderState
OWNER = "worker-t"
LEASE = timedelta(seconds=30)
SECOND = timedelta(seconds=1)
CHARGED_NOTHING = ["transient", "refused", "not_sent", "not_charged"]
MAY_HAVE_CHARGED = ["unknown", "broken", "abandoned", "succeeded"]


def ctx(w: World, now: datetime | None = None) -> Context:
    return Context(now or w.clock.now(), OWNER, w.timing)


def reserved() -> tuple[World, OrderAggregate]:
    """An order whose stock is held: its charge and its expiry timer are waiting."""
    w = World()
    order_id = w.create()
    w.step()
    aggregate = w.load(order_id)
    w.close()  # the decisions under test are pure: the world's clock and timing are enough
    assert aggregate.order.state is S.RESERVED
    return w, aggregate


def claim(
    aggregate: OrderAggregate, kind: StepKind, now: datetime, owner: str = OWNER
) -> tuple[OrderAggregate, Claim]:
    """Lease the newest step of `kind` as a store's claim would."""
    step = aggregate.latest(kind)
    assert step is not None
    expires = now + timedelta(seconds=30)
    running = attrs.evolve(
        step,
        status=StepStatus.RUNNING,
        attempt=step.attempt + 1,
        lease_owner=owner,
        lease_expires_at=expires,
    )
    leased = Claim(step.step_id, step.order_id, kind, running.attempt, owner, expires)
    return replace_step(aggregate, running), leased


def replace_step(aggregate: OrderAggregate, step: Step) -> OrderAggregate:
    steps = tuple(step if s.step_id == step.step_id else s for s in aggregate.steps)
    return attrs.evolve(aggregate, steps=steps)


def start(
    w: World, aggregate: OrderAggregate, leased: Claim, now: datetime | None = None
) -> tuple[OrderAggregate, CallPlan | None]:
    change, plan = saga.decide_start(aggregate, leased, ctx(w, now))
    assert aggregate.holds(change.guard) if change.guard else True
    return aggregate.with_change(change), plan


def result(
    w: World, aggregate: OrderAggregate, leased: Claim, outcome: Outcome, now: datetime
) -> OrderAggregate:
    change, _ = saga.decide_result(aggregate, leased, outcome, ctx(w, now))
    return aggregate.with_change(change)


def charge_in_flight() -> tuple[World, OrderAggregate, Claim]:
    """The first charge attempt is sent: paying, the charge running under attempt 1."""
    w, aggregate = reserved()
    aggregate, leased = claim(aggregate, StepKind.CHARGE, w.clock.now())
    aggregate, plan = start(w, aggregate, leased)
    assert plan is not None
    assert aggregate.order.state is S.PAYING
    return w, aggregate, leased


def with_first_charge_attempt(aggregate: OrderAggregate, outcome: str) -> OrderAggregate:
    """The charge's first attempt ended with `outcome`; the step waits for its next try."""
    charge = aggregate.latest(StepKind.CHARGE)
    assert charge is not None
    first = attrs.evolve(charge.attempts[0], outcome=outcome, finished_at=charge.created_at)
    return replace_step(
        aggregate,
        attrs.evolve(
            charge,
            status=StepStatus.RETRY_SCHEDULED,
            lease_owner=None,
            lease_expires_at=None,
            attempts=(first,),
        ),
    )


def kinds(aggregate: OrderAggregate, kind: StepKind) -> list[StepStatus]:
    return [s.status for s in aggregate.steps_of(kind)]


# -- when a charge may be sent again -----------------------------------------------------------
@pytest.mark.parametrize("earlier", CHARGED_NOTHING)
def test_a_charge_is_sent_again_when_every_earlier_attempt_is_known_to_have_charged_nothing(
    earlier: str,
) -> None:
    w, aggregate, _ = charge_in_flight()
    aggregate = with_first_charge_attempt(aggregate, earlier)
    aggregate, second = claim(aggregate, StepKind.CHARGE, w.clock.now())
    after, plan = start(w, aggregate, second)
    charge = after.latest(StepKind.CHARGE)
    assert charge is not None
    assert plan is not None
    assert plan.call.idempotency_key == charge.idempotency_key  # the same key, always
    assert after.order.state is S.PAYING
    assert after.order.payment_status == "in_flight"
    assert not list(after.steps_of(StepKind.RECONCILE_PAYMENT))


@pytest.mark.parametrize("earlier", MAY_HAVE_CHARGED)
def test_a_charge_is_never_sent_again_after_an_attempt_that_may_have_charged(
    earlier: str,
) -> None:
    w, aggregate, _ = charge_in_flight()
    aggregate = with_first_charge_attempt(aggregate, earlier)
    aggregate, second = claim(aggregate, StepKind.CHARGE, w.clock.now())
    after, plan = start(w, aggregate, second)
    assert plan is None
    charge = after.latest(StepKind.CHARGE)
    assert charge is not None
    assert charge.attempts[-1].outcome == "not_sent"
    assert charge.attempts[-1].error == "decided without calling the provider"
    assert charge.status is StepStatus.FAILED
    assert (charge.last_error or "").startswith("outcome_unknown")
    assert after.order.state is S.PAYMENT_UNKNOWN
    assert after.order.payment_status == "unknown"
    assert kinds(after, StepKind.RECONCILE_PAYMENT) == [StepStatus.PENDING]


# -- a transient charge failure when the hold has run out --------------------------------------
@pytest.mark.parametrize("earlier", CHARGED_NOTHING)
def test_a_transient_failure_after_the_hold_ran_out_releases_when_nothing_was_charged(
    earlier: str,
) -> None:
    w, aggregate, _ = charge_in_flight()
    aggregate = with_first_charge_attempt(aggregate, earlier)
    aggregate, second = claim(aggregate, StepKind.CHARGE, w.clock.now())
    aggregate, plan = start(w, aggregate, second)
    assert plan is not None
    expires = aggregate.order.reservation_expires_at
    assert expires is not None
    lease = second.lease_expires_at
    # The expiry is at the same instant the result comes in: the hold counts as run out.
    aggregate = attrs.evolve(
        aggregate, order=attrs.evolve(aggregate.order, reservation_expires_at=w.clock.now())
    )
    after = result(w, aggregate, second, Transient("503"), lease - timedelta(seconds=1))
    assert after.order.state is S.RELEASING
    assert kinds(after, StepKind.RELEASE_RESERVATION) == [StepStatus.PENDING]
    assert kinds(after, StepKind.CHARGE) == [StepStatus.FAILED]
    assert after.order.payment_status == "none"
    assert expires > w.clock.now()


@pytest.mark.parametrize("earlier", MAY_HAVE_CHARGED)
def test_a_transient_failure_after_the_hold_ran_out_never_releases_money_in_doubt(
    earlier: str,
) -> None:
    w, aggregate, _ = charge_in_flight()
    charge = aggregate.latest(StepKind.CHARGE)
    assert charge is not None
    # A charge step whose record shows an attempt that may have charged, however it came to
    # be retried: a transient failure after the hold ran out must not release.
    first = attrs.evolve(charge.attempts[0], outcome=earlier)
    aggregate = replace_step(aggregate, attrs.evolve(charge, attempts=(first,)))
    aggregate = attrs.evolve(
        aggregate, order=attrs.evolve(aggregate.order, reservation_expires_at=w.clock.now())
    )
    leased = Claim(
        charge.step_id, charge.order_id, StepKind.CHARGE, 1, OWNER, w.clock.now() + LEASE
    )
    after = result(w, aggregate, leased, Transient("503"), w.clock.now() + timedelta(seconds=1))
    assert after.order.state is S.PAYMENT_UNKNOWN
    assert not list(after.steps_of(StepKind.RELEASE_RESERVATION))


def test_a_transient_failure_before_the_hold_runs_out_is_retried_under_the_same_key() -> None:
    w, aggregate, leased = charge_in_flight()
    after = result(w, aggregate, leased, Transient("503"), w.clock.now() + timedelta(seconds=1))
    assert after.order.state is S.PAYING
    assert after.order.payment_status == "none"
    assert kinds(after, StepKind.CHARGE) == [StepStatus.RETRY_SCHEDULED]
    assert not list(after.steps_of(StepKind.RELEASE_RESERVATION))


# -- the reservation expiry --------------------------------------------------------------------
def fire_expiry(w: World, aggregate: OrderAggregate) -> OrderAggregate:
    """The expiry timer is claimed and started when the hold runs out (it makes no call)."""
    expires = aggregate.order.reservation_expires_at
    assert expires is not None
    aggregate, timer = claim(aggregate, StepKind.EXPIRE_RESERVATION, expires, owner="worker-e")
    after, plan = start(w, aggregate, timer, expires)
    assert plan is None
    assert kinds(after, StepKind.EXPIRE_RESERVATION) == [StepStatus.SUCCEEDED]
    return after


def test_the_expiry_while_a_charge_is_running_marks_the_payment_unknown_and_keeps_the_stock() -> (
    None
):
    w, aggregate, _ = charge_in_flight()
    after = fire_expiry(w, aggregate)
    assert after.order.state is S.PAYMENT_UNKNOWN
    assert after.order.reservation_expired
    assert kinds(after, StepKind.CHARGE) == [StepStatus.RUNNING]  # its result may still come
    assert not list(after.steps_of(StepKind.RELEASE_RESERVATION))


def test_the_expiry_before_any_charge_was_sent_releases_and_cancels_the_charge() -> None:
    w, aggregate = reserved()
    after = fire_expiry(w, aggregate)
    assert after.order.state is S.RELEASING
    assert after.order.state_reason == "reservation_expired"
    assert after.order.reservation_expired
    assert kinds(after, StepKind.CHARGE) == [StepStatus.CANCELLED]
    assert [s.last_error for s in after.steps_of(StepKind.CHARGE)] == ["reservation_expired"]
    assert kinds(after, StepKind.RELEASE_RESERVATION) == [StepStatus.PENDING]


@pytest.mark.parametrize("earlier", CHARGED_NOTHING)
def test_the_expiry_between_charge_attempts_that_charged_nothing_releases(earlier: str) -> None:
    w, aggregate, _ = charge_in_flight()
    after = fire_expiry(w, with_first_charge_attempt(aggregate, earlier))
    assert after.order.state is S.RELEASING
    assert kinds(after, StepKind.RELEASE_RESERVATION) == [StepStatus.PENDING]


@pytest.mark.parametrize("earlier", MAY_HAVE_CHARGED)
def test_the_expiry_between_charge_attempts_never_releases_money_in_doubt(earlier: str) -> None:
    w, aggregate, _ = charge_in_flight()
    after = fire_expiry(w, with_first_charge_attempt(aggregate, earlier))
    assert after.order.state is S.PAYMENT_UNKNOWN
    assert not list(after.steps_of(StepKind.RELEASE_RESERVATION))


def test_the_expiry_in_payment_unknown_stops_the_automatic_status_checks_for_a_person() -> None:
    w, aggregate, leased = charge_in_flight()
    aggregate = result(w, aggregate, leased, UnknownOutcome("timeout"), w.clock.now() + SECOND)
    assert kinds(aggregate, StepKind.RECONCILE_PAYMENT) == [StepStatus.PENDING]
    after = fire_expiry(w, aggregate)
    assert after.order.state is S.PAYMENT_UNKNOWN
    assert kinds(after, StepKind.RECONCILE_PAYMENT) == [StepStatus.CANCELLED]
    assert not list(after.steps_of(StepKind.RELEASE_RESERVATION))
    assert after.needs_attention


def test_the_expiry_after_payment_changes_nothing() -> None:
    w, aggregate, leased = charge_in_flight()
    paid = result(
        w,
        aggregate,
        leased,
        Succeeded({"payment_reference": "p", "status": "succeeded"}),
        w.clock.now() + SECOND,
    )
    assert paid.order.state is S.PAID
    # The timer was cancelled with the payment; were it claimed anyway, it would do nothing.
    timer = paid.latest(StepKind.EXPIRE_RESERVATION)
    assert timer is not None
    assert timer.status is StepStatus.CANCELLED
    revived = replace_step(paid, attrs.evolve(timer, status=StepStatus.PENDING))
    after = fire_expiry(w, revived)
    assert after.order == paid.order
    assert not list(after.steps_of(StepKind.RELEASE_RESERVATION))


# -- a result whose lease ran out --------------------------------------------------------------
def test_a_result_at_the_instant_its_lease_ends_is_dropped_and_one_just_before_is_kept() -> None:
    w, aggregate, leased = charge_in_flight()
    success = Succeeded({"payment_reference": "p", "status": "succeeded"})
    late = saga.decide_result(aggregate, leased, success, ctx(w, leased.lease_expires_at))[0]
    assert aggregate.holds(leased.guard)  # no takeover yet: only the lease's end tells
    # Nothing of the result is stored; only its rejection is audited.
    assert late.order is None
    assert (late.steps, late.refunds, late.history, late.events) == ((), (), (), ())
    rejected = [(a.action, a.outcome) for a in late.audit]
    assert rejected == [("step.result_rejected", "lease_expired")]
    in_time = saga.decide_result(
        aggregate, leased, success, ctx(w, leased.lease_expires_at - timedelta(microseconds=1))
    )[0]
    assert aggregate.with_change(in_time).order.state is S.PAID


def test_a_result_of_a_taken_over_attempt_is_dropped_with_a_rejection_record() -> None:
    w, aggregate, leased = charge_in_flight()
    taken, _ = claim(aggregate, StepKind.CHARGE, w.clock.now() + LEASE, owner="worker-other")
    change, following = saga.decide_result(
        taken, leased, UnknownOutcome("timeout"), ctx(w, w.clock.now() + SECOND)
    )
    assert change.is_empty
    assert following is None
    assert change.on_reject is not None
    assert change.on_reject.actor == OWNER
    assert change.on_reject.details == {"attempt": leased.attempt}


# -- the status check (reconciliation) ---------------------------------------------------------
def payment_in_doubt() -> tuple[World, OrderAggregate, Claim]:
    """The charge's outcome is unknown; the status check is claimed and sent."""
    w, aggregate, leased = charge_in_flight()
    now = w.clock.now() + SECOND
    aggregate = result(w, aggregate, leased, UnknownOutcome("timeout"), now)
    assert aggregate.order.state is S.PAYMENT_UNKNOWN
    aggregate, check = claim(aggregate, StepKind.RECONCILE_PAYMENT, now)
    aggregate, plan = start(w, aggregate, check, now)
    charge = aggregate.latest(StepKind.CHARGE)
    assert charge is not None
    assert plan is not None
    assert plan.request == StatusRequest(charge.idempotency_key)
    return w, aggregate, check


@pytest.mark.parametrize(
    ("answer", "status", "error", "attempt_outcome"),
    [
        (Transient("503"), StepStatus.RETRY_SCHEDULED, "503", "transient"),
        (UnknownOutcome("timeout"), StepStatus.RETRY_SCHEDULED, "timeout", "unknown"),
        # The call went through, but its answer is no success: the attempt says so.
        (Succeeded({"status": "pending"}), StepStatus.RETRY_SCHEDULED, "charge pending", "pending"),
        (
            Broken("status: HTTP 200 with a malformed body"),
            StepStatus.BLOCKED,
            "status: HTTP 200 with a malformed body",
            "broken",
        ),
        (Refused("card_declined"), StepStatus.BLOCKED, "card_declined", "refused"),
        (
            Succeeded({"status": "refunded"}),
            StepStatus.BLOCKED,
            "unexpected status 'refunded'",
            "broken",
        ),
    ],
)
def test_a_status_check_that_settles_nothing_keeps_the_payment_unknown(
    answer: Outcome, status: StepStatus, error: str, attempt_outcome: str
) -> None:
    w, aggregate, check = payment_in_doubt()
    after = result(w, aggregate, check, answer, w.clock.now() + 2 * SECOND)
    assert after.order.state is S.PAYMENT_UNKNOWN
    assert after.order.payment_status == "unknown"
    step = after.latest(StepKind.RECONCILE_PAYMENT)
    assert step is not None
    assert step.status is status
    assert step.last_error == error
    [attempt] = step.attempts
    assert (attempt.outcome, attempt.error) == (attempt_outcome, error)
    assert after.latest(StepKind.CHARGE) == aggregate.latest(StepKind.CHARGE)  # not re-armed
    assert not list(after.steps_of(StepKind.RELEASE_RESERVATION))


def test_a_status_check_that_finds_the_charge_succeeded_pays_the_order() -> None:
    w, aggregate, check = payment_in_doubt()
    answer = Succeeded({"status": "succeeded", "payment_reference": "pay-1"})
    after = result(w, aggregate, check, answer, w.clock.now() + 2 * SECOND)
    assert after.order.state is S.PAID
    assert after.order.state_reason == "reconciliation confirmed the charge"
    assert after.order.payment_reference == "pay-1"
    assert kinds(after, StepKind.CHARGE) == [StepStatus.SUCCEEDED]
    # Both the status check and the charge it settled keep the provider's answer.
    assert [s.result for s in after.steps_of(StepKind.RECONCILE_PAYMENT)] == [answer.result]
    assert [s.result for s in after.steps_of(StepKind.CHARGE)] == [answer.result]


def test_a_confirmed_charge_without_a_reference_records_none_rather_than_a_made_up_one() -> None:
    w, aggregate, check = payment_in_doubt()
    after = result(w, aggregate, check, Succeeded({"status": "succeeded"}), w.clock.now() + SECOND)
    assert after.order.state is S.PAID
    assert after.order.payment_reference is None
    assert kinds(after, StepKind.SHIP) == [StepStatus.PENDING]
    assert kinds(after, StepKind.EXPIRE_RESERVATION) == [StepStatus.CANCELLED]


def test_a_status_check_that_finds_the_charge_failed_releases() -> None:
    w, aggregate, check = payment_in_doubt()
    after = result(w, aggregate, check, Succeeded({"status": "failed"}), w.clock.now() + SECOND)
    assert after.order.state is S.RELEASING
    assert after.order.state_reason == "payment_failed"
    assert after.order.payment_status == "failed"
    assert [s.result for s in after.steps_of(StepKind.RECONCILE_PAYMENT)] == [{"status": "failed"}]
    assert kinds(after, StepKind.RELEASE_RESERVATION) == [StepStatus.PENDING]


def test_no_charge_under_the_key_re_sends_it_with_a_fresh_budget_and_the_same_key() -> None:
    w, aggregate, check = payment_in_doubt()
    before = aggregate.latest(StepKind.CHARGE)
    assert before is not None
    now = w.clock.now() + 2 * SECOND
    after = result(w, aggregate, check, Refused("not_found"), now)
    charge = after.latest(StepKind.CHARGE)
    assert charge is not None
    assert after.order.state is S.PAYING
    assert after.order.payment_status == "none"
    assert charge.status is StepStatus.PENDING
    assert charge.next_attempt_at == now
    assert charge.idempotency_key == before.idempotency_key
    assert charge.last_error is None
    assert charge.lease_owner is None
    assert charge.lease_expires_at is None
    # A full budget of attempts from here on: five more tries before the step gives up.
    assert charge.armed_attempt == before.attempt
    assert charge.max_attempts == before.attempt + 5
    assert [a.outcome for a in charge.attempts] == ["not_charged"]


@pytest.mark.parametrize(("transients", "ends"), [(4, S.SHIPPED), (5, S.PAYING)])
def test_a_re_sent_charge_gets_five_fresh_attempts(transients: int, ends: OrderState) -> None:
    """After a status check found no charge, the re-sent charge is tried five more times, as a
    new charge would be, however many attempts came before."""
    w = World()
    try:
        w.sim.script("payments", "charge", ["timeout", *["transient"] * transients])
        order_id = w.create()
        w.settle()
        aggregate = w.load(order_id)
        assert aggregate.order.state is ends
        charge = aggregate.latest(StepKind.CHARGE)
        assert charge is not None
        outcomes = [a.outcome for a in charge.attempts]
        if ends is S.SHIPPED:
            assert outcomes == ["not_charged", *["transient"] * 4, "succeeded"]
        else:  # the fifth transient failure spent the budget; nothing was charged
            assert outcomes == ["not_charged", *["transient"] * 5]
            assert charge.status is StepStatus.FAILED
            assert w.charges(order_id) == []
            w.clock.advance(w.timing.reservation_ttl_s)
            w.settle()  # so the hold's expiry gives the stock back
            assert w.state(order_id) is S.PAYMENT_FAILED
        assert len(w.charges(order_id)) <= 1
    finally:
        w.close()


def test_no_charge_under_the_key_after_the_hold_ran_out_releases() -> None:
    w, aggregate, check = payment_in_doubt()
    expires = aggregate.order.reservation_expires_at
    assert expires is not None
    check = attrs.evolve(check, lease_expires_at=expires + LEASE)
    step = aggregate.latest(StepKind.RECONCILE_PAYMENT)
    assert step is not None
    aggregate = replace_step(aggregate, attrs.evolve(step, lease_expires_at=expires + LEASE))
    after = result(w, aggregate, check, Refused("not_found"), expires)
    assert after.order.state is S.RELEASING
    assert kinds(after, StepKind.RELEASE_RESERVATION) == [StepStatus.PENDING]


def test_no_charge_found_while_a_charge_attempt_is_in_flight_asks_again_later() -> None:
    w, aggregate, check = payment_in_doubt()
    charge = aggregate.latest(StepKind.CHARGE)
    assert charge is not None
    aggregate = replace_step(aggregate, attrs.evolve(charge, status=StepStatus.RUNNING))
    after = result(w, aggregate, check, Refused("not_found"), w.clock.now() + SECOND)
    assert after.order.state is S.PAYMENT_UNKNOWN
    assert kinds(after, StepKind.RECONCILE_PAYMENT) == [StepStatus.RETRY_SCHEDULED]
    assert kinds(after, StepKind.CHARGE) == [StepStatus.RUNNING]


@pytest.mark.parametrize(
    "answer",
    [
        Succeeded({"status": "failed"}),
        Succeeded({"status": "succeeded", "payment_reference": "p"}),
        Refused("not_found"),
    ],
)
def test_a_status_answer_arriving_after_the_order_left_payment_unknown_changes_nothing(
    answer: Outcome,
) -> None:
    w, aggregate, check = payment_in_doubt()
    # Meanwhile the order was settled another way (here: it is paid).
    moved = attrs.evolve(
        aggregate.order, state=S.PAID, payment_status="succeeded", payment_reference="early"
    )
    aggregate = attrs.evolve(aggregate, order=moved)
    after = result(w, aggregate, check, answer, w.clock.now() + SECOND)
    assert after.order.state is S.PAID
    assert after.order.payment_status == "succeeded"
    assert after.order.payment_reference == "early"
    step = after.latest(StepKind.RECONCILE_PAYMENT)
    assert step is not None
    assert step.status is StepStatus.SUCCEEDED
    assert step.result == {"skipped": "payment no longer unknown"}
    assert after.latest(StepKind.CHARGE) == aggregate.latest(StepKind.CHARGE)
    assert not list(after.steps_of(StepKind.RELEASE_RESERVATION))


def test_a_status_check_claimed_after_the_order_left_payment_unknown_is_not_sent() -> None:
    w, aggregate, leased = charge_in_flight()
    aggregate = result(w, aggregate, leased, UnknownOutcome("timeout"), w.clock.now() + SECOND)
    moved = attrs.evolve(aggregate.order, state=S.PAID, payment_status="succeeded")
    aggregate = attrs.evolve(aggregate, order=moved)
    aggregate, check = claim(aggregate, StepKind.RECONCILE_PAYMENT, w.clock.now() + SECOND)
    after, plan = start(w, aggregate, check, w.clock.now() + SECOND)
    assert plan is None
    step = after.latest(StepKind.RECONCILE_PAYMENT)
    assert step is not None
    assert step.status is StepStatus.SUCCEEDED
    assert step.result == {"skipped": "payment no longer unknown"}
    assert (step.attempts[-1].outcome, step.attempts[-1].error) == (
        "not_sent",
        "payment no longer unknown",
    )
    assert after.order.state is S.PAID


# -- what a person may do ----------------------------------------------------------------------
def test_a_charge_stopped_with_an_unknown_outcome_is_never_retried_whatever_the_state() -> None:
    w, aggregate, _ = charge_in_flight()
    charge = aggregate.latest(StepKind.CHARGE)
    assert charge is not None
    stopped = attrs.evolve(
        charge, status=StepStatus.FAILED, last_error="outcome_unknown: timeout", lease_owner=None
    )
    aggregate = replace_step(aggregate, stopped)
    assert aggregate.order.state is S.PAYING
    with pytest.raises(NotRetryable) as refused:
        commands.retry(aggregate, OPERATOR, ctx(w))
    assert str(refused.value) == "the payment outcome is unknown: reconcile instead"
    retried = commands.retry(
        replace_step(aggregate, attrs.evolve(stopped, last_error="503")), OPERATOR, ctx(w)
    )
    assert [s.status for s in retried.steps] == [StepStatus.PENDING]


def test_a_manual_reconcile_queues_one_status_check_not_two() -> None:
    w, aggregate, leased = charge_in_flight()
    aggregate = result(w, aggregate, leased, UnknownOutcome("timeout"), w.clock.now() + SECOND)
    assert kinds(aggregate, StepKind.RECONCILE_PAYMENT) == [StepStatus.PENDING]
    change = commands.reconcile(aggregate, OPERATOR, ctx(w))
    again = aggregate.with_change(change)
    assert kinds(again, StepKind.RECONCILE_PAYMENT) == [StepStatus.PENDING]
    assert [(a.action, a.outcome) for a in change.audit] == [("manual.reconcile", "already_queued")]
    # Once the automatic checks stopped (blocked), a manual reconcile queues a new one.
    check = aggregate.latest(StepKind.RECONCILE_PAYMENT)
    assert check is not None
    blocked = replace_step(aggregate, attrs.evolve(check, status=StepStatus.BLOCKED))
    change = commands.reconcile(blocked, OPERATOR, ctx(w))
    queued = blocked.with_change(change)
    assert kinds(queued, StepKind.RECONCILE_PAYMENT) == [StepStatus.BLOCKED, StepStatus.PENDING]
    new_check = queued.latest(StepKind.RECONCILE_PAYMENT)
    assert new_check is not None
    assert [(a.action, a.outcome, a.step_id, a.details) for a in change.audit] == [
        ("manual.reconcile", "queued", new_check.step_id, {"role": "operator"})
    ]


# -- what the record says about why --------------------------------------------------------------
def test_an_expiry_release_and_a_release_refused_by_doubt_say_why() -> None:
    w, aggregate, _ = charge_in_flight()
    released = fire_expiry(w, with_first_charge_attempt(aggregate, "transient"))
    assert released.order.state_reason == "reservation_expired"
    w, aggregate, _ = charge_in_flight()
    kept = fire_expiry(w, with_first_charge_attempt(aggregate, "unknown"))
    assert kept.order.state_reason == "reservation expired with the payment in doubt"


def test_a_re_sent_charge_keeps_the_record_of_attempts_that_were_known_to_charge_nothing() -> None:
    w, aggregate, check = payment_in_doubt()
    charge = aggregate.latest(StepKind.CHARGE)
    assert charge is not None
    # Attempt 1 failed transiently; attempt 2's outcome is unknown (as the status check began).
    first = attrs.evolve(charge.attempts[0], attempt=1, outcome="transient")
    second = attrs.evolve(charge.attempts[0], attempt=2, outcome="unknown")
    aggregate = replace_step(aggregate, attrs.evolve(charge, attempt=2, attempts=(first, second)))
    after = result(w, aggregate, check, Refused("not_found"), w.clock.now() + SECOND)
    resent = after.latest(StepKind.CHARGE)
    assert resent is not None
    assert [a.outcome for a in resent.attempts] == ["transient", "not_charged"]
    assert after.order.state_reason == "reconciliation found no charge: re-send with the same key"
    status_check = after.latest(StepKind.RECONCILE_PAYMENT)
    assert status_check is not None
    assert status_check.result == {"status": "not_found"}


def test_no_charge_found_after_the_hold_ran_out_releases_saying_so() -> None:
    w, aggregate, check = payment_in_doubt()
    expires = aggregate.order.reservation_expires_at
    assert expires is not None
    check = attrs.evolve(check, lease_expires_at=expires + LEASE)
    step = aggregate.latest(StepKind.RECONCILE_PAYMENT)
    assert step is not None
    aggregate = replace_step(aggregate, attrs.evolve(step, lease_expires_at=expires + LEASE))
    after = result(w, aggregate, check, Refused("not_found"), expires)
    assert after.order.state_reason == "reservation_expired"


def test_a_status_check_while_a_charge_is_in_flight_says_so() -> None:
    w, aggregate, check = payment_in_doubt()
    charge = aggregate.latest(StepKind.CHARGE)
    assert charge is not None
    aggregate = replace_step(aggregate, attrs.evolve(charge, status=StepStatus.RUNNING))
    after = result(w, aggregate, check, Refused("not_found"), w.clock.now() + SECOND)
    step = after.latest(StepKind.RECONCILE_PAYMENT)
    assert step is not None
    assert step.last_error == "a charge attempt is still in flight"


def test_an_expiry_timer_never_has_a_result_to_commit() -> None:
    w, aggregate = reserved()
    expires = aggregate.order.reservation_expires_at
    assert expires is not None
    aggregate, timer = claim(aggregate, StepKind.EXPIRE_RESERVATION, expires)
    with pytest.raises(AssertionError, match=r"^expire_reservation makes no external call$"):
        saga.decide_result(aggregate, timer, Succeeded({}), ctx(w, expires))


def test_a_chained_step_that_decides_to_make_no_call_is_not_handed_to_the_executor() -> None:
    """With a zero-length hold, the charge chained after the reservation finds the hold run out
    and releases instead of charging: there is nothing for the executor to go on with."""
    base = World()
    try:
        aggregate = base.load(base.create())
    finally:
        base.close()
    timing = attrs.evolve(base.timing, reservation_ttl_s=0.0)
    now = base.clock.now()
    aggregate, reserve = claim(aggregate, StepKind.RESERVE, now)
    context = Context(now, OWNER, timing)
    change, _ = saga.decide_start(aggregate, reserve, context)
    aggregate = aggregate.with_change(change)
    change, following = saga.decide_result(
        aggregate,
        reserve,
        Succeeded({"reservation_id": "r", "status": "held"}),
        context,
        chain=True,
    )
    after = aggregate.with_change(change)
    assert following is None
    assert after.order.state is S.RELEASING
    assert kinds(after, StepKind.CHARGE) == [StepStatus.CANCELLED]


def test_the_expiry_leaves_its_record_the_state_it_found_and_why() -> None:
    w, aggregate, _ = charge_in_flight()
    expires = aggregate.order.reservation_expires_at
    assert expires is not None
    aggregate, timer = claim(aggregate, StepKind.EXPIRE_RESERVATION, expires, owner="worker-e")
    change, _ = saga.decide_start(aggregate, timer, ctx(w, expires))
    after = aggregate.with_change(change)
    step = after.step(timer.step_id)
    assert step is not None
    assert [(a.outcome, a.error) for a in step.attempts] == [("succeeded", None)]
    assert step.result == {"state_at_expiry": "paying"}
    assert [(a.action, a.outcome, a.step_id) for a in change.audit] == [
        ("reservation.expired", "paying", timer.step_id)
    ]
    assert after.order.state_reason == "reservation expired with a charge in flight"


def test_the_expiry_in_payment_unknown_says_the_status_checks_stopped_for_a_person() -> None:
    w, aggregate, leased = charge_in_flight()
    aggregate = result(w, aggregate, leased, UnknownOutcome("timeout"), w.clock.now() + SECOND)
    after = fire_expiry(w, aggregate)
    check = after.latest(StepKind.RECONCILE_PAYMENT)
    assert check is not None
    assert check.last_error == "reservation expired: manual reconciliation"


# -- giving the stock back ---------------------------------------------------------------------
def releasing() -> tuple[World, OrderAggregate, Claim]:
    """The charge was declined; the release is claimed and sent under the reserve's key."""
    w, aggregate, leased = charge_in_flight()
    now = w.clock.now() + SECOND
    aggregate = result(w, aggregate, leased, Refused("card_declined"), now)
    assert aggregate.order.state is S.RELEASING
    aggregate, release = claim(aggregate, StepKind.RELEASE_RESERVATION, now)
    aggregate, plan = start(w, aggregate, release, now)
    reserve = aggregate.latest(StepKind.RESERVE)
    assert reserve is not None
    assert plan is not None
    assert plan.request == ReleaseRequest(reserve.idempotency_key)
    return w, aggregate, release


@pytest.mark.parametrize(
    ("answer", "status"),
    [
        ({"status": "released"}, "released"),
        ({"status": "nothing_to_release"}, "nothing_to_release"),
        ({}, "released"),
    ],
)
def test_a_release_records_what_the_warehouse_said(answer: dict[str, str], status: str) -> None:
    w, aggregate, release = releasing()
    change, _ = saga.decide_result(
        aggregate, release, Succeeded(answer), ctx(w, w.clock.now() + SECOND)
    )
    after = aggregate.with_change(change)
    assert after.order.state is S.PAYMENT_FAILED
    assert after.order.state_reason == "card_declined"  # why the stock was given back
    assert after.order.reservation_status == status
    step = after.step(release.step_id)
    assert step is not None
    assert step.status is StepStatus.SUCCEEDED
    assert step.result == answer
    released = [e for e in change.events if e.type == "reservation.released"]
    assert [e.payload for e in released] == [
        {
            "order_id": str(after.order.order_id),
            "actor": release.owner,
            "status": status,
            "step_id": str(step.step_id),
        }
    ]
    assert ("compensation.release_reservation", status) in [
        (a.action, a.outcome) for a in change.audit
    ]


@pytest.mark.parametrize(
    ("answer", "status", "error"),
    [
        (Transient("503"), StepStatus.RETRY_SCHEDULED, "503"),
        (UnknownOutcome("timeout"), StepStatus.RETRY_SCHEDULED, "timeout"),
        (Refused("no_such_reservation"), StepStatus.BLOCKED, "no_such_reservation"),
        (Broken("release: HTTP 418"), StepStatus.BLOCKED, "release: HTTP 418"),
    ],
)
def test_a_release_that_did_not_happen_is_retried_or_blocked_and_the_order_waits(
    answer: Outcome, status: StepStatus, error: str
) -> None:
    w, aggregate, release = releasing()
    after = result(w, aggregate, release, answer, w.clock.now() + SECOND)
    assert after.order.state is S.RELEASING
    assert after.order.reservation_status == "held"
    step = after.step(release.step_id)
    assert step is not None
    assert (step.status, step.last_error) == (status, error)


def test_an_unknown_charge_outcome_never_queues_a_second_status_check() -> None:
    """A status check waits to ask again (it found no charge while an attempt was in flight);
    that attempt's own outcome then comes back unknown: the check already queued is enough."""
    w, aggregate, check = payment_in_doubt()
    charge = aggregate.latest(StepKind.CHARGE)
    assert charge is not None
    now = w.clock.now() + SECOND
    lease = now + LEASE
    retrying = attrs.evolve(
        charge,
        status=StepStatus.RUNNING,
        attempt=2,
        lease_owner="worker-c",
        lease_expires_at=lease,
        attempts=(*charge.attempts, attrs.evolve(charge.attempts[0], attempt=2, outcome=None)),
    )
    aggregate = replace_step(aggregate, retrying)
    aggregate = result(w, aggregate, check, Refused("not_found"), now)
    assert kinds(aggregate, StepKind.RECONCILE_PAYMENT) == [StepStatus.RETRY_SCHEDULED]
    second = Claim(charge.step_id, charge.order_id, StepKind.CHARGE, 2, "worker-c", lease)
    after = result(w, aggregate, second, UnknownOutcome("timeout"), now + SECOND)
    assert after.order.state is S.PAYMENT_UNKNOWN
    assert kinds(after, StepKind.RECONCILE_PAYMENT) == [StepStatus.RETRY_SCHEDULED]


def test_a_late_charge_success_pays_and_cancels_the_waiting_status_check() -> None:
    w, aggregate, check = payment_in_doubt()
    charge = aggregate.latest(StepKind.CHARGE)
    assert charge is not None
    now = w.clock.now() + SECOND
    lease = now + LEASE
    retrying = attrs.evolve(
        charge,
        status=StepStatus.RUNNING,
        attempt=2,
        lease_owner="worker-c",
        lease_expires_at=lease,
        attempts=(*charge.attempts, attrs.evolve(charge.attempts[0], attempt=2, outcome=None)),
    )
    aggregate = result(w, replace_step(aggregate, retrying), check, Refused("not_found"), now)
    second = Claim(charge.step_id, charge.order_id, StepKind.CHARGE, 2, "worker-c", lease)
    paid = Succeeded({"payment_reference": "p-2", "status": "succeeded"})
    after = result(w, aggregate, second, paid, now + SECOND)
    assert after.order.state is S.PAID
    status_check = after.latest(StepKind.RECONCILE_PAYMENT)
    assert status_check is not None
    assert (status_check.status, status_check.last_error) == (
        StepStatus.CANCELLED,
        "payment confirmed",
    )


def test_a_charge_answer_is_kept_on_its_step_and_a_missing_reference_is_none() -> None:
    w, aggregate, leased = charge_in_flight()
    answer = Succeeded({"payment_reference": "p-1", "status": "succeeded"})
    paid = result(w, aggregate, leased, answer, w.clock.now() + SECOND)
    assert [s.result for s in paid.steps_of(StepKind.CHARGE)] == [answer.result]
    assert paid.order.payment_reference == "p-1"
    bare = result(w, aggregate, leased, Succeeded({"status": "succeeded"}), w.clock.now() + SECOND)
    assert bare.order.state is S.PAID
    assert bare.order.payment_reference is None


def test_a_declined_charge_marks_the_payment_failed() -> None:
    w, aggregate, leased = charge_in_flight()
    after = result(w, aggregate, leased, Refused("card_declined"), w.clock.now() + SECOND)
    assert after.order.payment_status == "failed"
    charge = after.latest(StepKind.CHARGE)
    assert charge is not None
    assert (charge.status, charge.last_error) == (StepStatus.FAILED, "card_declined")


@pytest.mark.parametrize(("detail", "error"), [("503", "503"), ("", "transient")])
def test_a_transient_failure_after_the_hold_ran_out_stops_the_charge_saying_why(
    detail: str, error: str
) -> None:
    w, aggregate, leased = charge_in_flight()
    aggregate = attrs.evolve(
        aggregate, order=attrs.evolve(aggregate.order, reservation_expires_at=w.clock.now())
    )
    after = result(w, aggregate, leased, Transient(detail), w.clock.now() + SECOND)
    charge = after.latest(StepKind.CHARGE)
    assert charge is not None
    assert (charge.status, charge.last_error) == (StepStatus.FAILED, error)
    assert after.order.state is S.RELEASING


@pytest.mark.parametrize(
    ("detail", "reason"), [("charge: timed out", "charge: timed out"), ("", "outcome unknown")]
)
def test_an_unknown_charge_outcome_says_why_the_payment_is_in_doubt(
    detail: str, reason: str
) -> None:
    w, aggregate, leased = charge_in_flight()
    after = result(w, aggregate, leased, UnknownOutcome(detail), w.clock.now() + SECOND)
    assert after.order.state is S.PAYMENT_UNKNOWN
    assert after.order.state_reason == reason
    charge = after.latest(StepKind.CHARGE)
    assert charge is not None
    assert charge.last_error == f"outcome_unknown: {reason}"


def test_a_charge_sends_the_orders_total_and_currency() -> None:
    w, aggregate = reserved()
    aggregate, leased = claim(aggregate, StepKind.CHARGE, w.clock.now())
    _, plan = start(w, aggregate, leased)
    assert plan is not None
    assert plan.request == ChargeRequest(aggregate.order.total_minor, "RUB")


def test_a_charge_claimed_after_the_hold_ran_out_is_not_sent_and_the_stock_goes_back() -> None:
    w, aggregate = reserved()
    expires = aggregate.order.reservation_expires_at
    assert expires is not None
    aggregate, leased = claim(aggregate, StepKind.CHARGE, expires)
    after, plan = start(w, aggregate, leased, expires)
    assert plan is None
    assert after.order.reservation_expired
    assert (after.order.state, after.order.state_reason) == (S.RELEASING, "reservation_expired")
    charge = after.latest(StepKind.CHARGE)
    assert charge is not None
    assert (charge.status, charge.last_error) == (StepStatus.CANCELLED, "reservation_expired")
    assert charge.attempts[-1].outcome == "not_sent"


def test_a_charge_not_re_sent_says_an_earlier_attempts_outcome_is_unknown() -> None:
    w, aggregate, _ = charge_in_flight()
    aggregate = with_first_charge_attempt(aggregate, "unknown")
    aggregate, second = claim(aggregate, StepKind.CHARGE, w.clock.now())
    after, _ = start(w, aggregate, second)
    assert after.order.state_reason == "an earlier attempt's outcome is unknown"


def test_a_reservation_records_the_hold_and_the_warehouses_answer() -> None:
    w = World()
    try:
        order_id = w.create()
        now = w.clock.now()
        w.step()
        aggregate = w.load(order_id)
    finally:
        w.close()
    order = aggregate.order
    reserve = aggregate.latest(StepKind.RESERVE)
    assert reserve is not None
    assert order.reservation_id
    assert reserve.result == {"reservation_id": order.reservation_id, "status": "held"}
    assert (order.reservation_status, order.reserved_at) == ("held", now)
    assert order.reservation_expires_at == now + timedelta(seconds=w.timing.reservation_ttl_s)


def test_each_attempt_keeps_the_detail_of_its_outcome() -> None:
    w, aggregate, leased = charge_in_flight()
    after = result(w, aggregate, leased, Refused("card_declined"), w.clock.now() + SECOND)
    charge = after.latest(StepKind.CHARGE)
    assert charge is not None
    assert [(a.outcome, a.error) for a in charge.attempts] == [("refused", "card_declined")]


def test_a_start_is_written_only_under_the_claims_generation_and_a_stale_one_is_recorded() -> None:
    w, aggregate = reserved()
    fresh, leased = claim(aggregate, StepKind.CHARGE, w.clock.now())
    change, _ = saga.decide_start(fresh, leased, ctx(w))
    assert change.guard == leased.guard  # the store applies it only if the generation holds
    taken, _ = claim(fresh, StepKind.CHARGE, w.clock.now(), owner="worker-other")
    stale, plan = saga.decide_start(taken, leased, ctx(w))
    assert plan is None
    assert stale.is_empty
    assert stale.guard == leased.guard
    assert stale.on_reject is not None
    assert (stale.on_reject.action, stale.on_reject.actor) == ("step.result_rejected", OWNER)
