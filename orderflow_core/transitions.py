"""The allowed transitions of the order lifecycle, as data (docs/lifecycle.md)."""

from __future__ import annotations

from collections.abc import Mapping

from orderflow_core.errors import InvalidTransition
from orderflow_core.states import OrderState as S

PROCESS_VERSION = 1

# (from, to) -> what triggers it. Every state change in the engine goes through `check`.
TRANSITIONS: Mapping[int, Mapping[tuple[S, S], str]] = {
    1: {
        (S.CREATED, S.RESERVING): "executor starts the reserve step",
        (S.CREATED, S.CANCELLED): "cancel before the reserve step started",
        (S.RESERVING, S.RESERVED): "warehouse confirmed",
        (S.RESERVING, S.RESERVATION_FAILED): "warehouse refused",
        (S.RESERVING, S.CANCELLING): "cancel while the reserve step is failed or blocked",
        (S.RESERVED, S.PAYING): "executor starts the charge step",
        (S.RESERVED, S.CANCELLING): "cancel",
        (S.RESERVED, S.RELEASING): "reservation expired with no charge ever sent",
        (S.PAYING, S.PAID): "payment confirmed",
        (S.PAYING, S.RELEASING): "payment refused, or expired with nothing charged",
        (S.PAYING, S.PAYMENT_UNKNOWN): "charge outcome unknown",
        (S.PAYMENT_UNKNOWN, S.PAID): "reconciliation or a late answer confirmed the charge",
        (S.PAYMENT_UNKNOWN, S.RELEASING): "reconciliation found the charge failed",
        (S.PAYMENT_UNKNOWN, S.PAYING): "reconciliation found no charge: re-send, same key",
        (S.RELEASING, S.PAYMENT_FAILED): "release done after a refusal or expiry",
        (S.CANCELLING, S.CANCELLED): "release done after a cancel",
        (S.PAID, S.SHIPPING): "executor starts the ship step",
        (S.SHIPPING, S.SHIPPED): "carrier confirmed",
        (S.SHIPPING, S.SHIPPING_FAILED): "carrier refused, or retries exhausted",
        (S.SHIPPING_FAILED, S.SHIPPING): "operator retries shipping",
        (S.SHIPPING_FAILED, S.REFUNDED): "a full refund succeeded",
    },
}


def is_allowed(current: S, requested: S, version: int = PROCESS_VERSION) -> bool:
    """Whether the table of `version` has the edge current -> requested."""
    return (current, requested) in TRANSITIONS[version]


def check(current: S, requested: S, version: int = PROCESS_VERSION) -> str:
    """Return the trigger of an allowed edge, or raise `InvalidTransition`."""
    trigger = TRANSITIONS[version].get((current, requested))
    if trigger is None:
        raise InvalidTransition(current.value, requested.value)
    return trigger
