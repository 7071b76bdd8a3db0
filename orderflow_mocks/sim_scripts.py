"""Scripted outcomes: how a test makes the next matching call fail in a chosen way."""

from __future__ import annotations

from collections import deque

import attrs

from orderflow_mocks.sim_wire import OPERATIONS, OUTCOME_KINDS


@attrs.frozen
class ScriptedOutcome:
    """One outcome waiting for a matching call; `retry_after_s` rides on a `transient`."""

    kind: str
    retry_after_s: float | None = None


def check_operation(service: str, operation: str) -> None:
    """Raise ValueError unless `operation` is one of `service`'s."""
    if service not in OPERATIONS:
        raise ValueError(f"unknown service {service!r}; expected one of {sorted(OPERATIONS)}")
    if operation not in OPERATIONS[service]:
        raise ValueError(
            f"unknown operation {operation!r} of {service}; expected one of {OPERATIONS[service]}"
        )


def _check_outcomes(operation: str, outcomes: list[str]) -> None:
    for kind in outcomes:
        if kind not in OUTCOME_KINDS:
            raise ValueError(f"unknown outcome {kind!r}; expected one of {sorted(OUTCOME_KINDS)}")
        if kind == "pending" and operation != "charge":
            raise ValueError("the outcome 'pending' exists only for payments charge")


class ScriptBook:
    """Queues of outcomes per (service, operation, order), consumed in order.

    A call for one order consumes that order's queue first, then the wildcard queue
    (scripted with no order), then defaults to `success`.
    """

    def __init__(self) -> None:
        self._queues: dict[tuple[str, str, str | None], deque[ScriptedOutcome]] = {}

    def add(
        self,
        service: str,
        operation: str,
        outcomes: list[str],
        order_id: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        """Append `outcomes` to the queue of matching calls; ValueError if any is invalid."""
        check_operation(service, operation)
        _check_outcomes(operation, outcomes)
        if retry_after_s is not None and retry_after_s < 0:
            raise ValueError("retry_after_s must not be negative")
        queue = self._queues.setdefault((service, operation, order_id), deque())
        queue.extend(ScriptedOutcome(kind, retry_after_s) for kind in outcomes)

    def next(self, service: str, operation: str, order_id: str | None) -> ScriptedOutcome:
        """Consume the outcome for one call (order-specific before wildcard, else success)."""
        keys: list[tuple[str, str, str | None]] = [(service, operation, None)]
        if order_id is not None:
            keys.insert(0, (service, operation, order_id))
        for key in keys:
            queue = self._queues.get(key)
            if queue:
                return queue.popleft()
        return ScriptedOutcome("success")

    def pending(self) -> list[dict[str, object]]:
        """What is still scripted (for the ledger's readers and for debugging)."""
        return [
            {"service": s, "operation": op, "order_id": order, "outcomes": [o.kind for o in q]}
            for (s, op, order), q in self._queues.items()
            if q
        ]

    def clear(self) -> None:
        """Forget every script."""
        self._queues.clear()
