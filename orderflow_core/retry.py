"""The retry policy as a pure function: a returned decision, never an exception."""

from __future__ import annotations

from collections.abc import Callable

import attrs

from orderflow_core.outcomes import Broken, Outcome, Transient, UnknownOutcome
from orderflow_core.states import StepKind


@attrs.frozen
class RetryAt:
    """Try again after `delay_s` seconds."""

    delay_s: float


@attrs.frozen
class GiveUp:
    """The retry budget is spent: the step becomes `failed`."""


@attrs.frozen
class Block:
    """A permanent technical error: the step becomes `blocked` for a person."""


RetryDecision = RetryAt | GiveUp | Block


@attrs.frozen
class RetryPolicy:
    """Exponential delays per attempt, a capped Retry-After hint, optional jitter.

    `attempt` is the 1-based number of the attempt that just failed, counted within the current
    retry budget (a re-armed step starts counting again from 1).
    """

    delays_s: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
    attempts_per_budget: int = 5
    retry_after_cap_s: float = 60.0
    jitter: float = 0.0  # 0.1 spreads each delay uniformly over ±10 %

    def __attrs_post_init__(self) -> None:
        if not self.delays_s or any(d < 0 for d in self.delays_s):
            raise ValueError("delays_s must be non-empty and non-negative")
        if self.attempts_per_budget < 1:
            raise ValueError("attempts_per_budget must be at least 1")
        if not 0.0 <= self.jitter < 1.0:
            raise ValueError("jitter must be in [0, 1)")

    def decide(
        self,
        kind: StepKind,
        attempt: int,
        outcome: Outcome,
        random: Callable[[], float] | None = None,
    ) -> RetryDecision:
        """What to do after attempt number `attempt` of a `kind` step ended with `outcome`."""
        del kind  # every kind shares one schedule; kept for per-kind policies
        if isinstance(outcome, Broken):
            return Block()
        if attempt >= self.attempts_per_budget:
            return GiveUp()
        if isinstance(outcome, Transient) and outcome.retry_after_s is not None:
            return RetryAt(min(max(outcome.retry_after_s, 0.0), self.retry_after_cap_s))
        if not isinstance(outcome, Transient | UnknownOutcome):
            return Block()
        delay = self.delays_s[min(attempt, len(self.delays_s)) - 1]
        if self.jitter and random is not None:
            delay *= 1.0 + self.jitter * (2.0 * random() - 1.0)
        return RetryAt(delay)
