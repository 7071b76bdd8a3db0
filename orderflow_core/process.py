"""Process versions as data: which transitions and step kinds an order runs, by the
`process_version` it was created with (docs/lifecycle.md).

An order runs to its end on the version it was created with; `ORDERFLOW_PROCESS_VERSION` picks
the version of new orders (the newest by default). Adding a version: a `Process` here (and the
step kinds it adds, see orderflow_core/steps/registry.py). Retiring one: once no order is left
on it (`SELECT count(*) FROM orders WHERE process_version = N`), drop it from `PROCESSES`.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from orderflow_core.states import OrderState as S
from orderflow_core.states import StepKind as K

# (from, to) -> what triggers it. Every state change in the engine goes through `check`.
EDGES_V1: Mapping[tuple[S, S], str] = {
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
}



@attrs.frozen
class Process:
    """One version of the order process.

    `transitions`: the allowed (from, to) edges and what triggers each. `steps`: the step kinds
    its orders run (each defined once in the step registry). `then`: the steps a step kind's
    success adds in this version, beyond what its definition does itself.
    """

    version: int
    summary: str
    transitions: Mapping[tuple[S, S], str]
    steps: frozenset[K]
    then: Mapping[K, tuple[K, ...]] = attrs.field(factory=dict)


V1_STEPS = frozenset(
    {
        K.RESERVE,
        K.CHARGE,
        K.RECONCILE_PAYMENT,
        K.SHIP,
        K.RELEASE_RESERVATION,
        K.EXPIRE_RESERVATION,
        K.REFUND,
    }
)

PROCESSES: Mapping[int, Process] = {
    p.version: p
    for p in (
        Process(1, "reserve, charge, ship (with compensations)", EDGES_V1, V1_STEPS),
        Process(
            2,
            "version 1, then a notification to the customer once shipped",
            EDGES_V1,  # the notification changes no state
            V1_STEPS | {K.NOTIFY_CUSTOMER},
            then={K.SHIP: (K.NOTIFY_CUSTOMER,)},
        ),
    )
}

NEWEST = max(PROCESSES)


def process_for(version: int) -> Process:
    """The process of `version`; ValueError names the known versions."""
    process = PROCESSES.get(version)
    if process is None:
        raise ValueError(f"unknown process version {version}; known: {sorted(PROCESSES)}")
    return process
