"""A pure, in-process simulation of the warehouse, payments, shipping and notification services.

Why it exists: every failure the saga must survive (refusal, 5xx, timeout, lost response, a
pending charge, a late reservation) can be rehearsed deterministically — in memory by the core
tests and, wrapped 1:1 by `orderflow_mocks`, over real sockets. It is synchronous and every call
of `handle` is atomic, so one event loop may call it from many requests at once.

Every change (effects, stored answers, ledger lines) is handed, as plain data, to an optional
`journal` before the call returns, so a journal that is written durably keeps what the services
did across a restart (`entries` and `restore` rebuild it).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import attrs

from orderflow_mocks.sim_scripts import ScriptBook, ScriptedOutcome, check_operation
from orderflow_mocks.sim_wire import (
    REQUEST_CHECKS,
    InvalidRequestError,
    SimResponse,
    check_idempotency_key,
    fingerprint,
    problem,
)
from orderflow_mocks.sim_world import PERMANENT_ANSWERS, SimWorld

__all__ = ["Journal", "SimResponse", "Simulator"]

# Receives the entries of one change; raising makes the call fail (nothing is answered).
Journal = Callable[[list[dict[str, Any]]], None]


def _system_now() -> datetime:
    return datetime.now(UTC)


def _uuid4_text() -> str:
    return str(uuid4())


@attrs.frozen
class _Stored:
    """A processed answer under one idempotency key, with the request it answered."""

    fingerprint: str
    response: SimResponse


@attrs.frozen
class _Request:
    """Who asked for what: the identity every call carries."""

    service: str
    operation: str
    idempotency_key: str | None
    order_id: str | None
    step_id: str | None


@attrs.frozen
class _Call:
    """Who called what, and what the simulated service did (one ledger line)."""

    service: str
    operation: str
    idempotency_key: str | None
    order_id: str | None
    step_id: str | None
    outcome: str
    effect_applied: bool
    at: str
    status: int | None
    replayed: bool


class Simulator:
    """The three simulated services: state, idempotency store, scripts and the ledger.

    `now` and `new_id` are injected so tests can fix time and ids.
    """

    def __init__(
        self,
        *,
        now: Callable[[], datetime] = _system_now,
        new_id: Callable[[], str] = _uuid4_text,
        journal: Journal | None = None,
    ) -> None:
        self._now = now
        self._new_id = new_id
        self._forget()
        self.journal = journal

    def _forget(self) -> None:
        self._world = SimWorld(self._new_id)
        self._scripts = ScriptBook()
        self._stored: dict[tuple[str, str, str], _Stored] = {}
        self._new_stored: list[tuple[str, str, str]] = []
        self._calls: list[_Call] = []

    def reset(self) -> None:
        """Forget all state, scripts, stored answers and the ledger."""
        self._forget()
        self._write([{"reset": True}])

    def entries(self) -> list[dict[str, Any]]:
        """The whole state but the scripts, as journal entries (`restore` reads them back)."""
        stored = [self._stored_entry(key) for key in self._stored]
        calls = [{"call": attrs.asdict(call)} for call in self._calls]
        return self._world.entries() + stored + calls

    def restore(self, entries: Iterable[Mapping[str, Any]]) -> None:
        """Apply journal entries in order (without journaling them again)."""
        for entry in entries:
            if entry.get("reset"):
                self._forget()
            elif "call" in entry:
                self._calls.append(_Call(**entry["call"]))
            elif entry.get("table") == "stored":
                value = entry["value"]
                service, operation, key = entry["key"]
                response = SimResponse(**value["response"])
                self._stored[(service, operation, key)] = _Stored(value["fingerprint"], response)
            else:
                self._world.restore(entry)

    def _stored_entry(self, key: tuple[str, str, str]) -> dict[str, Any]:
        return {"table": "stored", "key": list(key), "value": attrs.asdict(self._stored[key])}

    def _write(self, entries: list[dict[str, Any]]) -> None:
        if self.journal is not None:
            self.journal(entries)

    def script(
        self,
        service: str,
        operation: str,
        outcomes: list[str],
        order_id: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        """Make the next matching calls end with `outcomes`, in order; ValueError if invalid."""
        self._scripts.add(service, operation, outcomes, order_id, retry_after_s)

    def settle(self, idempotency_key: str, status: str) -> dict[str, Any]:
        """Resolve a pending charge to `succeeded`/`failed`.

        Raises KeyError for an unknown key and ValueError for a charge that is not pending.
        """
        settled = attrs.asdict(self._world.settle(idempotency_key, status))
        self._write(self._world.take_changes())
        return settled

    def ledger(self, order_id: str | None = None) -> dict[str, Any]:
        """Every call and every effect, optionally only those of one order."""
        calls = [attrs.asdict(c) for c in self._calls if order_id is None or c.order_id == order_id]
        return {
            "calls": calls,
            "effects": self._world.effects(order_id),
            "scripts": self._scripts.pending(),
        }

    def handle(
        self,
        service: str,
        operation: str,
        *,
        order_id: str | None,
        step_id: str | None,
        idempotency_key: str | None,
        body: Mapping[str, Any],
        path_key: str | None = None,
    ) -> SimResponse:
        """Serve one call; `path_key` is the charge key of the status call.

        A scripted outcome is consumed before the idempotency layer: `transient`, `timeout` and
        `permanent` answer without touching any state; `success`, `lost_response` and `pending`
        process the call (a replay of a stored answer counts as processing).
        ValueError for an operation the service does not have.
        """
        check_operation(service, operation)
        order = order_id or _order_of(body)
        request = _Request(service, operation, idempotency_key, order, step_id)
        try:
            key = self._check(operation, idempotency_key, body, path_key)
        except InvalidRequestError as exc:
            response = exc.response()
            self._record(request, "invalid", response, replayed=False)
            return response
        scripted = self._scripts.next(service, operation, request.order_id)
        response, replayed = self._respond(service, operation, scripted, key, body)
        self._record(request, scripted.kind, response, replayed=replayed)
        return attrs.evolve(response, body=copy.deepcopy(response.body))

    @staticmethod
    def _check(
        operation: str, key: str | None, body: Mapping[str, Any], path_key: str | None
    ) -> str:
        """The key the call is about: the idempotency key, or the status call's charge key."""
        REQUEST_CHECKS[operation](body)
        if operation == "status":
            if not path_key:
                raise InvalidRequestError(400, "invalid_parameter", "the charge key is missing")
            return path_key
        return check_idempotency_key(key)

    def _respond(
        self,
        service: str,
        operation: str,
        scripted: ScriptedOutcome,
        key: str,
        body: Mapping[str, Any],
    ) -> tuple[SimResponse, bool]:
        if scripted.kind == "transient":
            answer = problem(503, "service_unavailable", "scripted transient failure")
            return attrs.evolve(answer, retry_after_s=scripted.retry_after_s), False
        if scripted.kind == "timeout":
            return SimResponse(status=504, body={}, disposition="timeout"), False
        if scripted.kind == "permanent":
            status, code = PERMANENT_ANSWERS[operation]
            return problem(status, code, "scripted permanent refusal"), False
        response, replayed = self._process(
            service, operation, key, body, pending=scripted.kind == "pending"
        )
        if scripted.kind == "lost_response":
            response = attrs.evolve(response, disposition="lost_response")
        return response, replayed

    def _process(
        self, service: str, operation: str, key: str, body: Mapping[str, Any], *, pending: bool
    ) -> tuple[SimResponse, bool]:
        """The idempotency layer: replay a stored answer, refuse a reused key, or apply."""
        if operation == "status":
            return self._world.status(key), False
        fingerprint_ = fingerprint(body)
        stored = self._stored.get((service, operation, key))
        if stored is not None:
            if stored.fingerprint != fingerprint_:
                reused = "this Idempotency-Key was used with another request body"
                return problem(422, "idempotency_key_reused", reused), False
            return attrs.evolve(stored.response, effect_applied=False), True
        response = self._apply(operation, key, body, pending=pending)
        self._stored[(service, operation, key)] = _Stored(fingerprint_, response)
        self._new_stored.append((service, operation, key))
        return response, False

    def _apply(
        self, operation: str, key: str, body: Mapping[str, Any], *, pending: bool
    ) -> SimResponse:
        world = self._world
        if operation == "reserve":
            return world.reserve(key, body)
        if operation == "release":
            return world.release(key, body)
        if operation == "charge":
            return world.charge(key, body, pending=pending)
        if operation == "refund":
            return world.refund(key, body)
        if operation == "notify":
            return world.notify(key, body)
        return world.ship(key, body)

    def _record(
        self, request: _Request, outcome: str, response: SimResponse, *, replayed: bool
    ) -> None:
        answered = response.disposition == "answer" or outcome == "lost_response"
        self._calls.append(
            _Call(
                service=request.service,
                operation=request.operation,
                idempotency_key=request.idempotency_key,
                order_id=request.order_id,
                step_id=request.step_id,
                outcome=outcome,
                effect_applied=response.effect_applied,
                at=self._now().astimezone(UTC).isoformat(),
                status=response.status if answered else None,
                replayed=replayed,
            )
        )
        stored, self._new_stored = self._new_stored, []
        self._write(
            [
                *self._world.take_changes(),
                *(self._stored_entry(key) for key in stored),
                {"call": attrs.asdict(self._calls[-1])},
            ]
        )


def _order_of(body: Mapping[str, Any]) -> str | None:
    value = body.get("order_id")
    return value if isinstance(value, str) else None
