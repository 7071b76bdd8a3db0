"""Configuration of timing, and what every decision is told: the time, the actor, the id source."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from uuid import UUID

import attrs

from orderflow_core.ids import uuid7
from orderflow_core.retry import RetryPolicy


@attrs.frozen
class Timing:
    """The durations of the lifecycle, all configurable, with their documented defaults."""

    reservation_ttl_s: float = 900.0
    lease_s: float = 30.0
    heartbeat_s: float = 10.0
    call_timeout_s: float = 3.0
    max_concurrent: int = 20
    poll_interval_s: float = 0.5
    # Go straight on with the step a result makes due, in the same transaction (fewer claims
    # and transactions per order). Off by default so tests can step one claim at a time.
    chain_steps: bool = False
    retry: RetryPolicy = attrs.field(factory=RetryPolicy)


@attrs.frozen
class Context:
    """The inputs of a pure decision besides the aggregate: time, actor and id source."""

    now: datetime
    actor: str
    timing: Timing = attrs.field(factory=Timing)
    new_id: Callable[[], UUID] = uuid7
    random: Callable[[], float] | None = None
