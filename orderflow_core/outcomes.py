"""What an outbound call can come back with; adapters classify, the saga decides."""

from __future__ import annotations

from typing import Any

import attrs

from orderflow_core.states import AttemptOutcome


@attrs.frozen
class Succeeded:
    """The service confirmed the effect; `result` is its answer body."""

    result: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Refused:
    """A permanent business refusal (`out_of_stock`, `card_declined`, …): no effect applied."""

    code: str
    detail: str = ""


@attrs.frozen
class Transient:
    """A passing failure known to have applied nothing (5xx, connection refused, busy)."""

    detail: str = ""
    retry_after_s: float | None = None
    # A local bulkhead refusal: retry, but the service itself is not to blame.
    local: bool = False


@attrs.frozen
class UnknownOutcome:
    """The request may or may not have taken effect (timeout, lost response, pending)."""

    detail: str = ""


@attrs.frozen
class Broken:
    """A permanent technical error (unexpected 4xx, malformed answer): a person must look."""

    detail: str = ""


Outcome = Succeeded | Refused | Transient | UnknownOutcome | Broken


def outcome_name(outcome: Outcome) -> AttemptOutcome:
    """The name under which an attempt's outcome is recorded."""
    return {
        Succeeded: AttemptOutcome.SUCCEEDED,
        Refused: AttemptOutcome.REFUSED,
        Transient: AttemptOutcome.TRANSIENT,
        UnknownOutcome: AttemptOutcome.UNKNOWN,
        Broken: AttemptOutcome.BROKEN,
    }[type(outcome)]
