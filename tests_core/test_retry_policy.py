"""The retry policy: 1, 2, 4, 8 s, five attempts, Retry-After capped, jitter."""

from __future__ import annotations

import pytest

from orderflow_core import (
    Block,
    Broken,
    GiveUp,
    Refused,
    RetryAt,
    RetryPolicy,
    StepKind,
    Succeeded,
    Transient,
    UnknownOutcome,
)

POLICY = RetryPolicy()
DELAYS = "delays_s must be non-empty and non-negative"


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(1, RetryAt(1.0)), (2, RetryAt(2.0)), (3, RetryAt(4.0)), (4, RetryAt(8.0)), (5, GiveUp())],
)
def test_a_transient_error_waits_1_2_4_8_seconds_then_gives_up_after_the_fifth(
    attempt: int, expected: object
) -> None:
    assert POLICY.decide(StepKind.SHIP, attempt, Transient("503")) == expected


def test_an_unknown_outcome_on_a_call_without_money_at_stake_is_retried_like_a_transient() -> None:
    assert POLICY.decide(StepKind.RESERVE, 1, UnknownOutcome("timeout")) == RetryAt(1.0)


def test_a_retry_after_hint_replaces_the_schedule() -> None:
    assert POLICY.decide(StepKind.SHIP, 1, Transient("429", retry_after_s=7.0)) == RetryAt(7.0)


def test_a_retry_after_hint_is_capped_at_sixty_seconds_by_default() -> None:
    hint = Transient("503", retry_after_s=3600.0)
    assert POLICY.decide(StepKind.SHIP, 2, hint) == RetryAt(60.0)


def test_a_hint_does_not_buy_a_sixth_attempt() -> None:
    assert POLICY.decide(StepKind.SHIP, 5, Transient("503", retry_after_s=1.0)) == GiveUp()


def test_a_permanent_technical_error_blocks_at_once_even_on_the_first_attempt() -> None:
    assert POLICY.decide(StepKind.SHIP, 1, Broken("400")) == Block()


@pytest.mark.parametrize("outcome", [Refused("out_of_stock"), Succeeded({})])
def test_an_outcome_the_policy_does_not_know_blocks_rather_than_retrying(outcome: object) -> None:
    assert POLICY.decide(StepKind.RESERVE, 1, outcome) == Block()  # type: ignore[arg-type]


def test_configured_delays_are_used_and_the_last_repeats_when_attempts_outnumber_them() -> None:
    policy = RetryPolicy(delays_s=(0.5, 3.0), attempts_per_budget=4)
    decisions = [policy.decide(StepKind.SHIP, n, Transient()) for n in (1, 2, 3, 4)]
    assert decisions == [RetryAt(0.5), RetryAt(3.0), RetryAt(3.0), GiveUp()]


def test_without_jitter_the_delay_is_exact_even_with_a_random_source() -> None:
    assert POLICY.decide(StepKind.SHIP, 3, Transient(), random=lambda: 0.99) == RetryAt(4.0)


def test_jitter_spreads_the_delay_within_its_band_and_really_varies() -> None:
    policy = RetryPolicy(jitter=0.25)
    draws = iter([0.0, 0.5, 1.0 - 1e-9])
    delays = [
        policy.decide(StepKind.SHIP, 3, Transient(), random=lambda: next(draws)) for _ in range(3)
    ]
    assert [type(d) for d in delays] == [RetryAt] * 3
    values = [d.delay_s for d in delays if isinstance(d, RetryAt)]
    assert values[0] == pytest.approx(3.0)
    assert values[1] == pytest.approx(4.0)
    assert values[2] == pytest.approx(5.0)
    assert len(set(values)) == 3


@pytest.mark.parametrize(
    "kwargs", [{"delays_s": ()}, {"delays_s": (-1.0,)}, {"attempts_per_budget": 0}, {"jitter": 1.5}]
)
def test_a_nonsensical_policy_is_refused_at_construction(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"delays_s": (0.0,)},  # an immediate retry is a schedule too
        {"attempts_per_budget": 1},  # one attempt, no retry
        {"jitter": 0.0},
        {"jitter": 0.999},
    ],
)
def test_the_limits_of_a_sensible_policy_are_accepted(kwargs: dict[str, object]) -> None:
    policy = RetryPolicy(**kwargs)  # type: ignore[arg-type]
    assert policy.decide(StepKind.SHIP, policy.attempts_per_budget, Transient()) == GiveUp()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"delays_s": ()}, DELAYS),
        ({"delays_s": (1.0, -0.001)}, DELAYS),
        ({"attempts_per_budget": 0}, "attempts_per_budget must be at least 1"),
        ({"attempts_per_budget": -3}, "attempts_per_budget must be at least 1"),
        ({"jitter": 1.0}, "jitter must be in [0, 1)"),
        ({"jitter": -0.01}, "jitter must be in [0, 1)"),
    ],
)
def test_each_limit_is_refused_just_past_it_naming_the_setting(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError) as refused:
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
    assert str(refused.value) == message


def test_a_one_attempt_budget_gives_up_after_the_first_failure() -> None:
    policy = RetryPolicy(attempts_per_budget=1)
    assert policy.decide(StepKind.SHIP, 1, Transient()) == GiveUp()
    assert policy.decide(StepKind.SHIP, 1, UnknownOutcome("timeout")) == GiveUp()


def test_past_the_budget_it_still_gives_up() -> None:
    assert POLICY.decide(StepKind.SHIP, 6, Transient()) == GiveUp()


def test_a_negative_retry_after_hint_means_retry_now_not_a_negative_wait() -> None:
    assert POLICY.decide(StepKind.SHIP, 1, Transient(retry_after_s=-5.0)) == RetryAt(0.0)


def test_a_hint_just_under_and_at_the_cap_is_kept() -> None:
    assert POLICY.decide(StepKind.SHIP, 1, Transient(retry_after_s=59.5)) == RetryAt(59.5)
    assert POLICY.decide(StepKind.SHIP, 1, Transient(retry_after_s=60.0)) == RetryAt(60.0)
    capped = RetryPolicy(retry_after_cap_s=5.0)
    assert capped.decide(StepKind.SHIP, 1, Transient(retry_after_s=9.0)) == RetryAt(5.0)


def test_an_unknown_outcome_follows_the_same_schedule_and_budget() -> None:
    decisions = [POLICY.decide(StepKind.RESERVE, n, UnknownOutcome()) for n in (1, 2, 3, 4, 5)]
    assert decisions == [RetryAt(1.0), RetryAt(2.0), RetryAt(4.0), RetryAt(8.0), GiveUp()]


def test_a_broken_answer_blocks_even_when_the_budget_is_spent() -> None:
    assert POLICY.decide(StepKind.SHIP, 5, Broken("400")) == Block()


def test_jitter_without_a_random_source_leaves_the_delay_exact() -> None:
    assert RetryPolicy(jitter=0.25).decide(StepKind.SHIP, 3, Transient()) == RetryAt(4.0)
