"""orderflow's core: the order lifecycle, the saga, the retry policy, the ports and the engine.

Standard library and attrs only; nothing happens at import time.
"""

from __future__ import annotations

from orderflow_core.context import Context, Timing
from orderflow_core.errors import (
    DuplicateIdempotencyKey,
    Forbidden,
    IdempotencyKeyRequired,
    IdempotencyKeyReused,
    InvalidIdempotencyKey,
    InvalidParameter,
    InvalidTransition,
    NotFound,
    NotRetryable,
    OrderflowError,
    StoreUnavailable,
    Unauthenticated,
    ValidationFailed,
)
from orderflow_core.executor import Executor
from orderflow_core.model import (
    ApiIdempotency,
    Attempt,
    AuditEntry,
    Change,
    Claim,
    Guard,
    HistoryEntry,
    Item,
    Order,
    OrderAggregate,
    OutboxEvent,
    Principal,
    Refund,
    Step,
)
from orderflow_core.outcomes import Broken, Outcome, Refused, Succeeded, Transient, UnknownOutcome
from orderflow_core.ports import (
    CallContext,
    Clock,
    OrderStore,
    Payments,
    Services,
    Shipping,
    Users,
    Warehouse,
)
from orderflow_core.retry import Block, GiveUp, RetryAt, RetryPolicy
from orderflow_core.service import OrderService, OrderView, hash_token
from orderflow_core.states import (
    TERMINAL_STATES,
    OrderState,
    RefundStatus,
    Role,
    StepKind,
    StepStatus,
)
from orderflow_core.system_clock import SystemClock
from orderflow_core.transitions import PROCESS_VERSION, TRANSITIONS

__all__ = [
    "PROCESS_VERSION",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "ApiIdempotency",
    "Attempt",
    "AuditEntry",
    "Block",
    "Broken",
    "CallContext",
    "Change",
    "Claim",
    "Clock",
    "Context",
    "DuplicateIdempotencyKey",
    "Executor",
    "Forbidden",
    "GiveUp",
    "Guard",
    "HistoryEntry",
    "IdempotencyKeyRequired",
    "IdempotencyKeyReused",
    "InvalidIdempotencyKey",
    "InvalidParameter",
    "InvalidTransition",
    "Item",
    "NotFound",
    "NotRetryable",
    "Order",
    "OrderAggregate",
    "OrderService",
    "OrderState",
    "OrderStore",
    "OrderView",
    "OrderflowError",
    "OutboxEvent",
    "Outcome",
    "Payments",
    "Principal",
    "Refund",
    "RefundStatus",
    "Refused",
    "RetryAt",
    "RetryPolicy",
    "Role",
    "Services",
    "Shipping",
    "Step",
    "StepKind",
    "StepStatus",
    "StoreUnavailable",
    "Succeeded",
    "SystemClock",
    "Timing",
    "Transient",
    "Unauthenticated",
    "UnknownOutcome",
    "Users",
    "ValidationFailed",
    "Warehouse",
    "hash_token",
]
