"""The vocabulary of the order process: order states, step kinds and step statuses."""

from __future__ import annotations

import enum
from typing import ClassVar


class OrderState(enum.StrEnum):
    """Where an order is in its lifecycle (docs/lifecycle.md)."""

    CREATED = "created"  # accepted; the reserve step waits to run
    RESERVING = "reserving"  # the reserve step has started
    RESERVED = "reserved"  # stock is held; the charge step waits to run
    PAYING = "paying"  # the charge step has started
    PAID = "paid"  # money confirmed; the ship step waits to run
    SHIPPING = "shipping"  # the ship step has started
    SHIPPED = "shipped"  # terminal: the carrier confirmed
    RESERVATION_FAILED = "reservation_failed"  # terminal: the warehouse refused
    PAYMENT_UNKNOWN = "payment_unknown"  # money in doubt; only reconciliation moves it
    RELEASING = "releasing"  # giving the stock back after a refusal or expiry
    PAYMENT_FAILED = "payment_failed"  # terminal: refused or expired, stock released
    CANCELLING = "cancelling"  # giving the stock back after a cancel
    CANCELLED = "cancelled"  # terminal: cancelled before any money moved
    SHIPPING_FAILED = "shipping_failed"  # paid but not shipped: a person decides
    REFUNDED = "refunded"  # terminal: fully refunded after a shipping failure


TERMINAL_STATES: frozenset[OrderState] = frozenset(
    {
        OrderState.SHIPPED,
        OrderState.RESERVATION_FAILED,
        OrderState.PAYMENT_FAILED,
        OrderState.CANCELLED,
        OrderState.REFUNDED,
    }
)


class StepKind(str):
    """What a workflow step does, by name; each kind has one definition (orderflow_core/steps/).

    Open, unlike the other vocabularies here: the kinds below are the package's own, and a
    process version may bring one of its own (`StepKind("gift_wrap")`, see
    docs/step-kinds.md). There is one object per name, so kinds compare with `is` as enum
    members do, and `value` is the name, as on an enum member.
    """

    __slots__ = ()
    _named: ClassVar[dict[str, StepKind]] = {}

    RESERVE: ClassVar[StepKind]
    CHARGE: ClassVar[StepKind]
    RECONCILE_PAYMENT: ClassVar[StepKind]
    SHIP: ClassVar[StepKind]
    RELEASE_RESERVATION: ClassVar[StepKind]
    EXPIRE_RESERVATION: ClassVar[StepKind]
    REFUND: ClassVar[StepKind]
    NOTIFY_CUSTOMER: ClassVar[StepKind]

    def __new__(cls, name: str) -> StepKind:
        known = cls._named.get(name)
        if known is not None:
            return known
        if not isinstance(name, str) or not name or not name.isascii():
            raise ValueError(f"{name!r} is not a step kind's name")
        kind = cls._named[name] = super().__new__(cls, name)
        return kind

    @property
    def value(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"StepKind({self.value!r})"


StepKind.RESERVE = StepKind("reserve")
StepKind.CHARGE = StepKind("charge")
StepKind.RECONCILE_PAYMENT = StepKind("reconcile_payment")
StepKind.SHIP = StepKind("ship")
StepKind.RELEASE_RESERVATION = StepKind("release_reservation")
StepKind.EXPIRE_RESERVATION = StepKind("expire_reservation")
StepKind.REFUND = StepKind("refund")
StepKind.NOTIFY_CUSTOMER = StepKind("notify_customer")  # process version 2: after shipped
# The package's own kinds, in the order the lifecycle meets them.
BUILT_IN_KINDS: tuple[StepKind, ...] = tuple(StepKind._named.values())


class StepStatus(enum.StrEnum):
    """The life of one step; attempts live inside it."""

    PENDING = "pending"
    RUNNING = "running"
    RETRY_SCHEDULED = "retry_scheduled"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # retries exhausted, refused, or outcome unknown: see last_error
    BLOCKED = "blocked"  # permanent technical error: needs a person
    CANCELLED = "cancelled"


DUE_STATUSES: frozenset[StepStatus] = frozenset({StepStatus.PENDING, StepStatus.RETRY_SCHEDULED})
STOPPED_STATUSES: frozenset[StepStatus] = frozenset({StepStatus.FAILED, StepStatus.BLOCKED})
FINISHED_STATUSES: frozenset[StepStatus] = frozenset(
    {StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.BLOCKED, StepStatus.CANCELLED}
)


class AttentionReason(enum.StrEnum):
    """Why an order waits for a person (the attention queue)."""

    RETRIES_EXHAUSTED = "retries_exhausted"  # the current step failed after its last attempt
    BLOCKED = "blocked"  # the current step hit a permanent technical error
    RECONCILE_GAVE_UP = "reconcile_gave_up"  # payment in doubt, the status checks stopped
    EXPIRED_WHILE_UNKNOWN = "expired_while_unknown"  # the hold ran out, payment in doubt
    SHIPPING_FAILED = "shipping_failed"  # paid but the carrier refused or never answered
    NOTIFICATION_FAILED = "notification_failed"  # shipped, but the customer was not notified


class PaymentStatus(enum.StrEnum):
    """What the order knows of its money."""

    NONE = "none"  # no charge sent, or one the provider proved charged nothing
    IN_FLIGHT = "in_flight"  # a charge is being sent
    UNKNOWN = "unknown"  # a charge may have happened: only reconciliation settles it
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class ReservationStatus(enum.StrEnum):
    """What the order knows of its stock (the warehouse's release answers included)."""

    NONE = "none"
    HELD = "held"
    RELEASED = "released"
    NOTHING_TO_RELEASE = "nothing_to_release"


class AttemptOutcome(enum.StrEnum):
    """How one attempt of a step ended, as recorded on it."""

    SUCCEEDED = "succeeded"
    REFUSED = "refused"
    TRANSIENT = "transient"
    UNKNOWN = "unknown"
    BROKEN = "broken"
    ABANDONED = "abandoned"  # never reported back (a crash, a lost lease)
    NOT_SENT = "not_sent"  # decided without calling the service
    NOT_CHARGED = "not_charged"  # the provider's status call proved it charged nothing
    PENDING = "pending"  # a status check answered: the charge is not settled yet


class RefundStatus(enum.StrEnum):
    """A refund is its own operation with its own state (lifecycle rule 3)."""

    REQUESTED = "requested"
    PROCESSING = "processing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    BLOCKED = "blocked"


class Role(enum.StrEnum):
    """Who is asking; the service enforces what each role may do."""

    CUSTOMER = "customer"
    OPERATOR = "operator"
    SYSTEM = "system"
