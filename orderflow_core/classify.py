"""How a caller reads an answer of the external services into an `Outcome`.

One function over the operations of the step registry (each step module says what its
operation refuses and what its success looks like), shared by the HTTP clients and the
in-process simulated adapters, so a test that passes in memory means the same thing over a
socket.
"""

from __future__ import annotations

from typing import Any

from orderflow_core.outcomes import (
    Broken,
    Outcome,
    Refused,
    Succeeded,
    Transient,
    UnknownOutcome,
)
from orderflow_core.steps.definition import Operation
from orderflow_core.steps.registry import OPERATIONS


def classify(
    operation: str, status: int, body: object, retry_after_s: float | None = None
) -> Outcome:
    """The outcome of an answered call: `status` and the decoded JSON `body` (None if not JSON).

    2xx with the documented shape → Succeeded (a `pending` charge → UnknownOutcome); the documented
    refusal → Refused(code); 5xx → Transient; any other answer, or a malformed body → Broken.
    Calls that got no answer (timeout, dropped connection) never reach this function.
    """
    spec = OPERATIONS.get(operation)
    if spec is None:
        raise ValueError(f"unknown operation {operation!r}")
    if status >= 500:
        return Transient(detail=f"{operation}: HTTP {status}", retry_after_s=retry_after_s)
    if not isinstance(body, dict):
        return Broken(detail=f"{operation}: HTTP {status} with a body that is not a JSON object")
    if 200 <= status < 300:
        return _classify_success(spec, status, body)
    code = body.get("code")
    if isinstance(code, str) and (status, code) in spec.refusals:
        return Refused(code=code, detail=str(body.get("detail", "")))
    return Broken(detail=f"{operation}: unexpected HTTP {status} code={code!r}")


def _classify_success(spec: Operation, status: int, body: dict[str, Any]) -> Outcome:
    if spec.pending_is_unknown and body.get("status") == "pending":
        return UnknownOutcome(detail=f"{spec.name}: pending")
    if not spec.well_formed(body):
        return Broken(detail=f"{spec.name}: HTTP {status} with a malformed body")
    return Succeeded(result=body)
