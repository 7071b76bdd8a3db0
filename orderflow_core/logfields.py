"""The step a log line is about: order, step, attempt and worker, carried in a context variable.

Why a context variable: the executor runs each claimed step in its own task, so what it binds
there is seen by every line logged while that step runs (here or in an adapter it calls), and by
no other step's. A log formatter adds these fields to its output; the messages stay plain text.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping

from orderflow_core.model import Claim

_FIELDS: contextvars.ContextVar[Mapping[str, str | int] | None] = contextvars.ContextVar(
    "orderflow_log_fields", default=None
)


def bind_step(claim: Claim, worker: str) -> None:
    """From here on in this task, log lines are about this attempt of this step."""
    _FIELDS.set(
        {
            "order_id": str(claim.order_id),
            "step_id": str(claim.step_id),
            "attempt": claim.attempt,
            "worker": worker,
        }
    )


def current() -> Mapping[str, str | int]:
    """The fields bound in the running task (empty outside a step)."""
    return _FIELDS.get() or {}
