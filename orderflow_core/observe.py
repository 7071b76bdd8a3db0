"""The observer port: what the core reports for metrics and traces, with a no-op default.

Why a port: the core imports only the standard library and attrs, so it cannot speak Prometheus
or OpenTelemetry itself. It calls these methods at clear points (a claim, an attempt, a takeover,
a rejected stale result, a commit batch, published events); an adapter turns the calls into
metrics and spans. The default `NullObserver` does nothing, so the core runs the same without one.

The creating request's trace context travels with the order (`Order.trace_parent`, a W3C
`traceparent` string): the API's middleware puts it in `request_trace_parent` for the request in
progress, the service stores it with a new order, and each step attempt of that order links to it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Protocol

import attrs

from orderflow_core.model import Claim

# The W3C `traceparent` of the API request in progress (set by the HTTP adapter), if traced.
request_trace_parent: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "orderflow_request_trace_parent", default=None
)


@attrs.frozen
class ProbeReading:
    """What a metrics scrape reads from the store: the age of the oldest outbox event not yet
    published (0 when none waits) and how many orders wait for a person, by reason."""

    oldest_unpublished_age_s: float
    waiting_by_reason: Mapping[str, int]


class AttemptObservation(Protocol):
    """One step attempt being observed; told its outcome once the result is known."""

    def finished(self, outcome: str) -> None:
        """The attempt's outcome name (`succeeded`, `refused`, `transient`, `unknown`, ...)."""
        ...


class Observer(Protocol):
    """What the executor and the relay report. Every method is cheap and never raises."""

    def claimed(self, count: int) -> None:
        """One claim statement ran and leased `count` steps (0 included)."""
        ...

    def lease_taken_over(self, claim: Claim) -> None:
        """`claim` took over a step whose earlier attempt never reported back."""
        ...

    def stale_result_rejected(self, claim: Claim) -> None:
        """The result of `claim` was not committed: its generation no longer owned the step."""
        ...

    def step_attempt(
        self, claim: Claim, worker: str, trace_parent: str | None
    ) -> AbstractContextManager[AttemptObservation]:
        """Around one attempt (call and result commit); `trace_parent` is the trace of the
        request that created the order, if it was traced."""
        ...

    def commit_batch(self, size: int) -> None:
        """One store transaction committed the changes of `size` orders (group commit)."""
        ...

    def events_published(self, count: int) -> None:
        """The outbox relay published `count` events."""
        ...


class _NoAttempt:
    """Told nothing, times nothing: one shared instance, its own context manager (a generator
    based one would cost a few µs per attempt for nothing)."""

    def finished(self, outcome: str) -> None:
        del outcome

    def __enter__(self) -> _NoAttempt:
        return self

    def __exit__(self, *exc: object) -> None:
        del exc


_NO_ATTEMPT = _NoAttempt()


class NullObserver:
    """Reports nothing: the default everywhere."""

    def claimed(self, count: int) -> None:
        del count

    def lease_taken_over(self, claim: Claim) -> None:
        del claim

    def stale_result_rejected(self, claim: Claim) -> None:
        del claim

    def step_attempt(
        self, claim: Claim, worker: str, trace_parent: str | None
    ) -> AbstractContextManager[AttemptObservation]:
        del claim, worker, trace_parent
        return _NO_ATTEMPT

    def commit_batch(self, size: int) -> None:
        del size

    def events_published(self, count: int) -> None:
        del count


NULL_OBSERVER: Observer = NullObserver()
