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
