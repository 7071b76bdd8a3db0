"""The core's outbound ports served in-process by a `Simulator`.

Why: the saga's tests and the embedding story run against the simulated services without a
socket, and read answers through the same `classify` table as the HTTP clients.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orderflow_core.classify import classify
from orderflow_core.model import Item
from orderflow_core.outcomes import Outcome, UnknownOutcome
from orderflow_core.ports import CallContext, Services
from orderflow_mocks.simulation import SimResponse, Simulator


def outcome_of(operation: str, response: SimResponse) -> Outcome:
    """Classify a simulated answer exactly as an HTTP client would see it."""
    if response.disposition == "timeout":
        return UnknownOutcome(detail=f"{operation}: timed out")
    if response.disposition == "lost_response":
        return UnknownOutcome(detail=f"{operation}: connection dropped after sending")
    return classify(operation, response.status, response.body, response.retry_after_s)


def items_body(items: Sequence[Item]) -> list[dict[str, Any]]:
    """Order lines as the warehouse and the carrier receive them."""
    return [
        {"sku": i.sku, "quantity": i.quantity, "unit_price_minor": i.unit_price_minor}
        for i in items
    ]


class _SimulatedService:
    """Shared plumbing: call the simulator with the call's identity, classify the answer."""

    service: str = ""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    def _call(
        self,
        operation: str,
        call: CallContext,
        body: dict[str, Any],
        path_key: str | None = None,
    ) -> Outcome:
        response = self.sim.handle(
            self.service,
            operation,
            order_id=str(call.order_id),
            step_id=str(call.step_id),
            idempotency_key=call.idempotency_key,
            body=body,
            path_key=path_key,
        )
        return outcome_of(operation, response)


class SimulatedWarehouse(_SimulatedService):
    """`Warehouse` over the simulator."""

    service = "warehouse"

    async def reserve(self, call: CallContext, items: Sequence[Item]) -> Outcome:
        body = {"order_id": str(call.order_id), "items": items_body(items)}
        return self._call("reserve", call, body)

    async def release(self, call: CallContext, reservation_key: str) -> Outcome:
        body = {"order_id": str(call.order_id), "reservation_key": reservation_key}
        return self._call("release", call, body)


class SimulatedPayments(_SimulatedService):
    """`Payments` over the simulator."""

    service = "payments"

    async def charge(self, call: CallContext, amount_minor: int, currency: str) -> Outcome:
        body = {"order_id": str(call.order_id), "amount_minor": amount_minor, "currency": currency}
        return self._call("charge", call, body)

    async def charge_status(self, call: CallContext, charge_key: str) -> Outcome:
        return self._call("status", call, {}, path_key=charge_key)

    async def refund(self, call: CallContext, payment_reference: str, amount_minor: int) -> Outcome:
        body = {
            "order_id": str(call.order_id),
            "payment_reference": payment_reference,
            "amount_minor": amount_minor,
        }
        return self._call("refund", call, body)


class SimulatedShipping(_SimulatedService):
    """`Shipping` over the simulator."""

    service = "shipping"

    async def ship(self, call: CallContext, items: Sequence[Item]) -> Outcome:
        body = {"order_id": str(call.order_id), "items": items_body(items)}
        return self._call("ship", call, body)


class SimulatedNotifications(_SimulatedService):
    """`Notifications` over the simulator."""

    service = "notifications"

    async def notify(self, call: CallContext, template: str) -> Outcome:
        return self._call("notify", call, {"order_id": str(call.order_id), "template": template})


def simulated_services(sim: Simulator) -> Services:
    """The four ports wired to one simulator."""
    return Services(
        warehouse=SimulatedWarehouse(sim),
        payments=SimulatedPayments(sim),
        shipping=SimulatedShipping(sim),
        notifications=SimulatedNotifications(sim),
    )
