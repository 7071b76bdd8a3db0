"""The control API of the simulated services: scripts, settling pending charges, the ledger."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from orderflow_mocks.problems import ProblemError, json_object
from orderflow_mocks.settings import SIM_KEY


def _optional_text(body: dict[str, Any], field: str) -> str | None:
    value = body.get(field)
    if value is not None and (not isinstance(value, str) or not value):
        raise ProblemError(422, "validation_failed", f"{field}: must be a non-empty string")
    return value


def _text(body: dict[str, Any], field: str) -> str:
    value = _optional_text(body, field)
    if value is None:
        raise ProblemError(422, "validation_failed", f"{field}: is required")
    return value


def _retry_after(body: dict[str, Any]) -> float | None:
    value = body.get("retry_after_s")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ProblemError(422, "validation_failed", "retry_after_s: must be a number >= 0")
    return float(value)


def _outcomes(body: dict[str, Any]) -> list[str]:
    value = body.get("outcomes")
    if not isinstance(value, list) or not value or not all(isinstance(o, str) for o in value):
        raise ProblemError(422, "validation_failed", "outcomes: must be a non-empty list of names")
    return value


async def post_scripts(request: web.Request) -> web.Response:
    """`POST /_control/scripts`: queue outcomes for matching calls."""
    body = await json_object(request)
    unknown = set(body) - {"service", "operation", "order_id", "outcomes", "retry_after_s"}
    if unknown:
        raise ProblemError(422, "validation_failed", f"unknown fields: {sorted(unknown)}")
    service, operation = _text(body, "service"), _text(body, "operation")
    order_id, outcomes = _optional_text(body, "order_id"), _outcomes(body)
    retry_after_s = _retry_after(body)
    try:
        request.app[SIM_KEY].script(service, operation, outcomes, order_id, retry_after_s)
    except ValueError as exc:
        raise ProblemError(422, "validation_failed", str(exc)) from exc
    answer = {
        "status": "scripted",
        "service": service,
        "operation": operation,
        "order_id": order_id,
        "outcomes": outcomes,
        "retry_after_s": retry_after_s,
    }
    return web.json_response(answer, status=201)


async def post_settle(request: web.Request) -> web.Response:
    """`POST /_control/payments/settle`: resolve a pending charge."""
    body = await json_object(request)
    key = _text(body, "idempotency_key")
    status = _text(body, "status")
    if status not in ("succeeded", "failed"):
        raise ProblemError(422, "validation_failed", "status: must be succeeded or failed")
    try:
        charge = request.app[SIM_KEY].settle(key, status)
    except KeyError as exc:
        raise ProblemError(404, "not_found", "no charge was received under this key") from exc
    except ValueError as exc:
        raise ProblemError(409, "not_pending", str(exc)) from exc
    return web.json_response(charge)


async def get_ledger(request: web.Request) -> web.Response:
    """`GET /_control/ledger?order_id=`: every call and effect, optionally of one order."""
    order_id = request.query.get("order_id") or None
    return web.json_response(request.app[SIM_KEY].ledger(order_id))


async def post_reset(request: web.Request) -> web.Response:
    """`POST /_control/reset`: forget everything."""
    request.app[SIM_KEY].reset()
    return web.json_response({"status": "reset"})
