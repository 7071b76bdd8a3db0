"""Put an order into a chosen state (and step condition) and leave it there."""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

from orderflow_core import StepKind
from orderflow_core.model import Claim
from tests_core.world import CUSTOMER, World


class Crash(Exception):
    """Raised at a checkpoint: the executor stops there as if killed."""


def crash_at(point: str, kind: StepKind) -> Callable[[str, Claim], object]:
    async def checkpoint(name: str, claim: Claim) -> None:
        if name == point and claim.kind is kind:
            raise Crash(f"{point} of {kind.value}")

    return checkpoint


def _created(w: World) -> UUID:
    return w.create()


def _reserving_running(w: World) -> UUID:
    order_id = w.create()
    w.step()
    return order_id


def _reserving_stopped(w: World) -> UUID:
    w.sim.script("warehouse", "reserve", ["transient"] * 5)
    order_id = w.create()
    w.settle()
    return order_id


def _reserved(w: World) -> UUID:
    order_id = w.create()
    w.step()
    return order_id


def _paying_running(w: World) -> UUID:
    order_id = w.create()
    w.settle()
    return order_id


def _paying_stopped(w: World) -> UUID:
    w.sim.script("payments", "charge", ["transient"] * 5)
    order_id = w.create()
    w.settle()
    return order_id


def _payment_unknown(w: World) -> UUID:
    w.sim.script("payments", "charge", ["lost_response"])
    order_id = w.create()
    w.step()
    w.step()
    return order_id


def _paid(w: World) -> UUID:
    order_id = w.create()
    w.step()
    w.step()
    return order_id


def _releasing(w: World) -> UUID:
    w.sim.script("payments", "charge", ["permanent"])
    order_id = w.create()
    w.step()
    w.step()
    return order_id


def _shipping_failed(w: World) -> UUID:
    w.sim.script("shipping", "ship", ["permanent"])
    order_id = w.create()
    w.settle()
    return order_id


def _settled(*script: tuple[str, str, list[str]]) -> Callable[[World], UUID]:
    def reach(w: World) -> UUID:
        for service, operation, outcomes in script:
            w.sim.script(service, operation, outcomes)
        order_id = w.create()
        w.settle()
        return order_id

    return reach


def _cancelling(w: World) -> UUID:
    order_id = w.create()
    w.step()
    w.run(w.service.cancel(CUSTOMER, order_id))
    return order_id


# name -> (how to get there, the executor checkpoint crash that keeps it there, if any)
REACHERS: dict[str, tuple[Callable[[World], UUID], Callable[[str, Claim], object] | None]] = {
    "created": (_created, None),
    "reserving_running": (_reserving_running, crash_at("before_call", StepKind.RESERVE)),
    "reserving_stopped": (_reserving_stopped, None),
    "reserved": (_reserved, None),
    "paying_running": (_paying_running, crash_at("before_call", StepKind.CHARGE)),
    "paying_stopped": (_paying_stopped, None),
    "payment_unknown": (_payment_unknown, None),
    "paid": (_paid, None),
    "shipping": (_settled(), crash_at("before_call", StepKind.SHIP)),
    "shipped": (_settled(), None),
    "shipping_failed": (_shipping_failed, None),
    "releasing": (_releasing, None),
    "payment_failed": (_settled(("payments", "charge", ["permanent"])), None),
    "reservation_failed": (_settled(("warehouse", "reserve", ["permanent"])), None),
    "cancelling": (_cancelling, None),
    "cancelled": (_settled(), None),
    "refunded": (_shipping_failed, None),
}


def reach(name: str) -> tuple[World, UUID]:
    """A new world with one order in the named situation."""
    how, checkpoint = REACHERS[name]
    w = World(checkpoint=checkpoint)  # type: ignore[arg-type]
    order_id = how(w)
    if name == "cancelled":
        order_id = w.create()
        w.run(w.service.cancel(CUSTOMER, order_id))
    if name == "refunded":
        from tests_core.world import OPERATOR

        w.run(w.service.request_refund(OPERATOR, order_id, "r-1", None, "lost"))
        w.settle()
    return w, order_id
