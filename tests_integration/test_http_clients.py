"""The outbound aiohttp clients over real sockets: every outcome kind of every operation."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest

from orderflow_core.model import Item
from orderflow_core.outcomes import (
    Broken,
    Outcome,
    Refused,
    Succeeded,
    Transient,
    UnknownOutcome,
)
from orderflow_core.ports import CallContext
from orderflow_http.bulkhead import Bulkhead
from orderflow_http.clients import HttpNotifications, HttpPayments, HttpShipping, HttpWarehouse
from orderflow_mocks import running_mocks
from orderflow_mocks.simulation import Simulator

DEADLINE_S = 0.4  # generous for a loaded CI machine; the hold must exceed it
HOLD_S = 0.8
CHARGE_KEY = "charge-key"
ITEMS = [Item("SKU-1", 2, 500)]


@attrs.frozen
class Clients:
    warehouse: HttpWarehouse
    payments: HttpPayments
    shipping: HttpShipping
    notifications: HttpNotifications
    sim: Simulator
    ctx: CallContext
    reference: str


@asynccontextmanager
async def clients(**client_kw: Any) -> AsyncIterator[Clients]:
    """A mocks server on a free port, the three clients on it, and a settled charge to use."""
    order_id = uuid.uuid4()
    ctx = CallContext(order_id=order_id, step_id=uuid.uuid4(), idempotency_key="k1")
    async with running_mocks(hold_s=HOLD_S) as mocks:
        kw = {"timeout_s": DEADLINE_S, **client_kw}
        async with (
            HttpWarehouse(mocks.url, **kw) as warehouse,
            HttpPayments(mocks.url, **kw) as payments,
            HttpShipping(mocks.url, **kw) as shipping,
            HttpNotifications(mocks.url, **kw) as notifications,
        ):
            charged = mocks.sim.handle(
                "payments",
                "charge",
                order_id=str(order_id),
                step_id="setup",
                idempotency_key=CHARGE_KEY,
                body={"order_id": str(order_id), "amount_minor": 1000, "currency": "RUB"},
            )
            reference = charged.body["payment_reference"]
            yield Clients(warehouse, payments, shipping, notifications, mocks.sim, ctx, reference)


CALLS: dict[str, tuple[str, Callable[[Clients], Awaitable[Outcome]]]] = {
    "reserve": ("warehouse", lambda c: c.warehouse.reserve(c.ctx, ITEMS)),
    "release": ("warehouse", lambda c: c.warehouse.release(c.ctx, "reserve-key")),
    "charge": ("payments", lambda c: c.payments.charge(c.ctx, 1000, "RUB")),
    "status": ("payments", lambda c: c.payments.charge_status(c.ctx, CHARGE_KEY)),
    "refund": ("payments", lambda c: c.payments.refund(c.ctx, c.reference, 400)),
    "ship": ("shipping", lambda c: c.shipping.ship(c.ctx, ITEMS)),
    "notify": ("notifications", lambda c: c.notifications.notify(c.ctx, "shipped")),
}
REFUSED = {
    "reserve": Refused("out_of_stock", "scripted permanent refusal"),
    "charge": Refused("card_declined", "scripted permanent refusal"),
    "refund": Refused("refund_rejected", "scripted permanent refusal"),
    "ship": Refused("undeliverable", "scripted permanent refusal"),
    "notify": Refused("undeliverable_address", "scripted permanent refusal"),
}


def run_call(operation: str, outcomes: list[str], **client_kw: Any) -> tuple[Outcome, Clients]:
    """Script `outcomes` for `operation`, call it once through the real client."""
    service, invoke = CALLS[operation]

    async def main() -> tuple[Outcome, Clients]:
        async with clients(**client_kw) as c:
            c.sim.script(service, operation, outcomes, retry_after_s=1.5)
            return await invoke(c), c

    return asyncio.run(main())


def own_effects(c: Clients, operation: str) -> list[dict[str, Any]]:
    """Effects written by the call under test (not the setup charge)."""
    kind = {
        "reserve": "reservations",
        "release": "tombstones",
        "charge": "charges",
        "refund": "refunds",
        "ship": "shipments",
        "notify": "messages",
    }[operation]
    rows = c.sim.ledger()["effects"][kind]
    return [r for r in rows if r.get("idempotency_key", "k1") == "k1"]


@pytest.mark.parametrize("operation", list(CALLS))
def test_success_is_succeeded_and_carries_the_step_identity(operation: str) -> None:
    outcome, c = run_call(operation, ["success"])
    assert isinstance(outcome, Succeeded)
    call = c.sim.ledger()["calls"][-1]
    assert (call["idempotency_key"], call["order_id"], call["step_id"]) == (
        "k1",
        str(c.ctx.order_id),
        str(c.ctx.step_id),
    )


@pytest.mark.parametrize("operation", list(CALLS))
def test_transient_is_transient_with_the_retry_after_hint(operation: str) -> None:
    outcome, c = run_call(operation, ["transient"])
    assert outcome == Transient(detail=f"{operation}: HTTP 503", retry_after_s=1.5)
    assert operation == "status" or own_effects(c, operation) == []


@pytest.mark.parametrize("operation", list(CALLS))
def test_permanent_is_the_documented_refusal_or_broken(operation: str) -> None:
    outcome, c = run_call(operation, ["permanent"])
    if operation in REFUSED:
        assert outcome == REFUSED[operation]
    else:
        assert isinstance(outcome, Broken)
    assert operation == "status" or own_effects(c, operation) == []


@pytest.mark.parametrize("operation", list(CALLS))
def test_timeout_is_unknown_after_the_deadline_and_applies_nothing(operation: str) -> None:
    outcome, c = run_call(operation, ["timeout"])
    assert isinstance(outcome, UnknownOutcome)
    assert operation == "status" or own_effects(c, operation) == []


@pytest.mark.parametrize("operation", list(CALLS))
def test_lost_response_is_unknown_and_the_effect_was_applied(operation: str) -> None:
    # aiohttp re-sends an idempotent GET once on a dropped connection (RFC 9112 §9.3.1.1),
    # so the status call needs two lost answers to come back unanswered.
    outcome, c = run_call(operation, ["lost_response"] * (2 if operation == "status" else 1))
    assert isinstance(outcome, UnknownOutcome)
    assert operation == "status" or len(own_effects(c, operation)) == 1


def test_a_pending_charge_is_unknown_until_settled_then_the_status_says_succeeded() -> None:
    async def main() -> tuple[Outcome, Outcome, Outcome]:
        async with clients() as c:
            c.sim.script("payments", "charge", ["pending"])
            ctx = attrs.evolve(c.ctx, idempotency_key="pending-charge")
            charged = await c.payments.charge(ctx, 1000, "RUB")
            before = await c.payments.charge_status(c.ctx, "pending-charge")
            c.sim.settle("pending-charge", "succeeded")
            return charged, before, await c.payments.charge_status(c.ctx, "pending-charge")

    charged, before, after = asyncio.run(main())
    assert charged == UnknownOutcome("charge: pending")
    assert before == Succeeded({"status": "pending"})
    assert isinstance(after, Succeeded)
    assert after.result["status"] == "succeeded"


def test_the_status_of_a_key_with_no_charge_is_refused_not_found() -> None:
    async def main() -> Outcome:
        async with clients() as c:
            return await c.payments.charge_status(c.ctx, "never/charged?")

    assert asyncio.run(main()) == Refused("not_found", "no charge was received under this key")


def test_fifty_concurrent_identical_charges_through_the_client_charge_once() -> None:
    async def main() -> tuple[list[Outcome], list[dict[str, Any]]]:
        async with clients(connection_limit=10, bulkhead=Bulkhead(10)) as c:
            outcomes = await asyncio.gather(
                *(c.payments.charge(c.ctx, 1000, "RUB") for _ in range(50))
            )
            return list(outcomes), own_effects(c, "charge")

    outcomes, effects = asyncio.run(main())
    assert len({o.result["payment_reference"] for o in outcomes if isinstance(o, Succeeded)}) == 1
    assert all(isinstance(o, Succeeded) for o in outcomes)
    assert len(effects) == 1


def test_a_full_reject_bulkhead_answers_a_local_busy_without_calling_out() -> None:
    async def main() -> tuple[Outcome, int]:
        bulkhead = Bulkhead(1, "reject")
        async with clients(bulkhead=bulkhead) as c, bulkhead.slot():
            busy = await c.shipping.ship(c.ctx, ITEMS)
            return busy, len(c.sim.ledger()["calls"])

    busy, calls = asyncio.run(main())
    assert busy == Transient(detail="busy", local=True)
    assert calls == 1  # only the setup charge


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_a_refused_connection_is_transient_because_nothing_was_sent() -> None:
    async def main() -> Outcome:
        ctx = CallContext(uuid.uuid4(), uuid.uuid4(), "k1")
        async with HttpPayments(f"http://127.0.0.1:{free_port()}", timeout_s=1) as payments:
            return await payments.charge(ctx, 100, "RUB")

    outcome = asyncio.run(main())
    assert isinstance(outcome, Transient)
    assert "not sent" in outcome.detail
    assert not outcome.local
