"""Process versions as data: which transitions and step kinds an order runs, by the
`process_version` it was created with (docs/lifecycle.md).

An order runs to its end on the version it was created with; `ORDERFLOW_PROCESS_VERSION` picks
the version of new orders (the newest by default). A version owns its main sequence: its first
step kind and what each kind's success leads to (`then`), so a version inserts or reorders a
step as data. Adding a version: a `Process` here, or `add(process)` from outside the package
(with the step kinds it brings, `orderflow_core.steps.registry.add`); docs/step-kinds.md.
Retiring one: once no order is left on it
(`SELECT count(*) FROM orders WHERE process_version = N`), drop it from `PROCESSES`.
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
    its orders run (each defined once in the step registry). `then`: the main sequence — the
    steps a success of each kind leads to (a step that carried the order forward calls
    `Draft.advance`, which adds them). `first`: the step a new order starts with.
    """

    version: int
    summary: str
    transitions: Mapping[tuple[S, S], str]
    steps: frozenset[K]
    then: Mapping[K, tuple[K, ...]] = attrs.field(factory=dict)
    first: K = K.RESERVE

    def __attrs_post_init__(self) -> None:
        named = {self.first, *self.then, *(k for ks in self.then.values() for k in ks)}
        if not named <= self.steps:
            raise ValueError(f"version {self.version} sequences kinds it does not run: {named}")


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

# Reserve, then charge (its success found by the charge or by reconciliation), then ship.
THEN_V1: Mapping[K, tuple[K, ...]] = {K.RESERVE: (K.CHARGE,), K.CHARGE: (K.SHIP,)}

_PROCESSES: dict[int, Process] = {
    p.version: p
    for p in (
        Process(1, "reserve, charge, ship (with compensations)", EDGES_V1, V1_STEPS, THEN_V1),
        Process(
            2,
            "version 1, then a notification to the customer once shipped",
            EDGES_V1,  # the notification changes no state
            V1_STEPS | {K.NOTIFY_CUSTOMER},
            then={**THEN_V1, K.SHIP: (K.NOTIFY_CUSTOMER,)},
        ),
    )
}
# Every known version, by number (the package's own and those added with `add`).
PROCESSES: Mapping[int, Process] = _PROCESSES

# The version new orders get by default: the newest of the package's own.
NEWEST = max(PROCESSES)


def add(process: Process) -> None:
    """Make `process` known (an embedder's or a test's version); the same version twice is an
    error unless it is the same value. It does not change `NEWEST`: new orders get it only when
    configured to (`ORDERFLOW_PROCESS_VERSION`, `OrderService(process_version=…)`)."""
    known = _PROCESSES.get(process.version)
    if known is not None and known != process:
        raise ValueError(f"process version {process.version} is already defined")
    _PROCESSES[process.version] = process


def remove(version: int) -> None:
    """Forget an added version (a test's, once it ran); the package's own cannot be removed."""
    if version <= NEWEST:
        raise ValueError(f"process version {version} is one of the package's own")
    _PROCESSES.pop(version, None)


def process_for(version: int) -> Process:
    """The process of `version`; ValueError names the known versions."""
    process = PROCESSES.get(version)
    if process is None:
        raise ValueError(f"unknown process version {version}; known: {sorted(PROCESSES)}")
    return process
