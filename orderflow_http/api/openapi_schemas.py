"""The component schemas of the OpenAPI document (JSON Schema 2020-12, as OpenAPI 3.1 uses).

Why exact (`additionalProperties: false` on what we send): the conformance test validates real
responses against these, so a field added to `serialize` without being documented fails a test.
"""

from __future__ import annotations

from typing import Any

from orderflow_core import service
from orderflow_core.process import PROCESSES
from orderflow_core.states import (
    BUILT_IN_KINDS,
    AttentionReason,
    OrderState,
    RefundStatus,
    StepStatus,
)

Schema = dict[str, Any]

TIME: Schema = {"type": "string", "format": "date-time", "description": "ISO 8601, UTC"}
TIME_OR_NULL: Schema = {"type": ["string", "null"], "format": "date-time"}
UUID: Schema = {"type": "string", "format": "uuid"}
TEXT_OR_NULL: Schema = {"type": ["string", "null"]}
STATES = [s.value for s in OrderState]
REASONS = [r.value for r in AttentionReason]
KINDS = [k.value for k in BUILT_IN_KINDS]
ACTIONS = list(service.ACTIONS)


def ref(name: str) -> Schema:
    """A reference to a component schema."""
    return {"$ref": f"#/components/schemas/{name}"}


def obj(properties: dict[str, Schema], *, optional: frozenset[str] = frozenset()) -> Schema:
    """A closed object: every listed property is required unless `optional`, no others."""
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in properties if name not in optional],
        "additionalProperties": False,
    }


def param(name: str, where: str, schema: Schema, description: str, *, required: bool) -> Any:
    """An operation parameter."""
    return {
        "name": name,
        "in": where,
        "required": required,
        "schema": schema,
        "description": description,
    }


ORDER_ID = param(
    "order_id", "path", {"type": "string", "format": "uuid"}, "the order's id", required=True
)
IDEMPOTENCY_KEY = param(
    "Idempotency-Key",
    "header",
    {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"},
    "1-255 visible ASCII characters; the same key and body replay the first answer",
    required=True,
)
REPLAYED_HEADER = {
    "Idempotent-Replayed": {
        "description": "present (`true`) when this answer replays an earlier request",
        "schema": {"type": "string", "enum": ["true"]},
    }
}


def _requests() -> dict[str, Schema]:
    item = obj(
        {
            "sku": {"type": "string", "minLength": 1, "maxLength": 64},
            "quantity": {"type": "integer", "minimum": 1, "maximum": 1000},
            "unit_price_minor": {"type": "integer", "minimum": 0, "maximum": 10**12},
        }
    )
    create = obj(
        {
            "items": {"type": "array", "items": ref("Item"), "minItems": 1, "maxItems": 100},
            "currency": {"type": "string", "enum": ["RUB"]},
        }
    )
    refund = obj(
        {
            "amount_minor": {
                "type": "integer",
                "minimum": 1,
                "description": "default: everything not yet refunded",
            },
            "reason": {"type": "string", "minLength": 1, "maxLength": 500},
        },
        optional=frozenset({"amount_minor"}),
    )
    return {"Item": item, "CreateOrderRequest": create, "RefundRequest": refund}


def _steps() -> dict[str, Schema]:
    attempt = obj(
        {
            "attempt": {"type": "integer", "minimum": 1},
            "started_at": TIME,
            "finished_at": TIME_OR_NULL,
            "outcome": TEXT_OR_NULL,
            "error": TEXT_OR_NULL,
            "worker": {"type": "string"},
        }
    )
    step = obj(
        {
            "step_id": UUID,
            "kind": {"type": "string", "enum": KINDS},
            "status": {"type": "string", "enum": [s.value for s in StepStatus]},
            "attempt": {"type": "integer", "minimum": 0},
            "max_attempts": {"type": "integer", "minimum": 1},
            "idempotency_key": {"type": "string"},
            "next_attempt_at": TIME_OR_NULL,
            "lease_expires_at": TIME_OR_NULL,
            "last_error": TEXT_OR_NULL,
            "attempts": {"type": "array", "items": ref("Attempt")},
        }
    )
    return {"Attempt": attempt, "Step": step}


def _order_parts() -> dict[str, Schema]:
    history = obj(
        {
            "from": {"type": ["string", "null"], "enum": [*STATES, None]},
            "to": {"type": "string", "enum": STATES},
            "at": TIME,
            "actor": {"type": "string"},
            "reason": {"type": "string"},
        }
    )
    reservation = obj(
        {
            "status": {
                "type": "string",
                "enum": ["none", "held", "released", "nothing_to_release"],
            },
            "reservation_id": TEXT_OR_NULL,
            "reserved_at": TIME_OR_NULL,
            "expires_at": TIME_OR_NULL,
            "expired": {"type": "boolean"},
        }
    )
    payment = obj(
        {
            "status": {
                "type": "string",
                "enum": ["none", "in_flight", "unknown", "succeeded", "failed"],
            },
            "reference": TEXT_OR_NULL,
            "idempotency_key": {
                "type": ["string", "null"],
                "description": "the charge step's key, reused by every attempt and status check",
            },
            "amount_minor": {"type": "integer", "minimum": 0},
            "currency": {"type": "string"},
        }
    )
    return {"HistoryEntry": history, "Reservation": reservation, "Payment": payment}


def _refund() -> Schema:
    return obj(
        {
            "refund_id": UUID,
            "order_id": UUID,
            "amount_minor": {"type": "integer", "minimum": 1},
            "reason": {"type": "string"},
            "status": {"type": "string", "enum": [s.value for s in RefundStatus]},
            "requested_by": {"type": "string"},
            "step_id": UUID,
            "refund_reference": TEXT_OR_NULL,
            "last_error": TEXT_OR_NULL,
            "created_at": TIME,
            "updated_at": TIME,
        }
    )


def _summary_properties() -> dict[str, Schema]:
    return {
        "order_id": UUID,
        "customer_id": {"type": "string"},
        "state": {"type": "string", "enum": STATES},
        "state_reason": TEXT_OR_NULL,
        "process_version": {"type": "integer", "enum": sorted(PROCESSES)},
        "items": {"type": "array", "items": ref("Item")},
        "total_minor": {"type": "integer", "minimum": 0},
        "currency": {"type": "string"},
        "created_at": TIME,
        "updated_at": TIME,
        "needs_attention": {
            "type": "boolean",
            "description": "nothing will move this order until a person acts",
        },
        "attention_reason": {
            "type": ["string", "null"],
            "enum": [*REASONS, None],
            "description": "why it waits: the current step failed after its last attempt "
            "(retries_exhausted) or hit a permanent technical error (blocked); the payment is "
            "in doubt and the status checks stopped (reconcile_gave_up) or the reservation "
            "expired first (expired_while_unknown); paid but not shipped (shipping_failed); "
            "shipped but the customer's notification stopped (notification_failed, version 2)",
        },
        "attention_since": {**TIME_OR_NULL, "description": "when it started waiting"},
    }


def _orders() -> dict[str, Schema]:
    order = obj(
        {
            **_summary_properties(),
            "allowed_actions": {
                "type": "array",
                "items": {"type": "string", "enum": ACTIONS},
                "uniqueItems": True,
                "description": "what the caller may ask of this order now (its role, and the "
                "rules of its state and current step, decided by the core): cancel (customer), "
                "retry, reconcile, refund (operator)",
            },
            "history": {"type": "array", "items": ref("HistoryEntry")},
            "current_step": {"oneOf": [ref("Step"), {"type": "null"}]},
            "steps": {"type": "array", "items": ref("Step")},
            "reservation": ref("Reservation"),
            "payment": ref("Payment"),
            "refunds": {"type": "array", "items": ref("Refund")},
        }
    )
    page = obj(
        {
            "orders": {"type": "array", "items": ref("OrderSummary")},
            "next_cursor": {"type": ["string", "null"]},
        }
    )
    return {"OrderSummary": obj(_summary_properties()), "Order": order, "OrderPage": page}


def _feeds() -> dict[str, Schema]:
    audit_entry = obj(
        {
            "order_id": UUID,
            "at": TIME,
            "actor": {"type": "string"},
            "action": {"type": "string"},
            "outcome": {"type": "string"},
            "step_id": {"oneOf": [UUID, {"type": "null"}]},
            "details": {"type": "object"},
        }
    )
    audit_log = obj({"order_id": UUID, "entries": {"type": "array", "items": ref("AuditEntry")}})
    event = obj(
        {
            "seq": {"type": "integer", "minimum": 1},
            "event_id": UUID,
            "type": {
                "type": "string",
                "description": "`order.<state>` per transition, `order.needs_attention` "
                "(payload: AttentionPayload), `refund.<status>`, `reservation.released`",
            },
            "order_id": UUID,
            "payload": {"type": "object"},
            "created_at": TIME,
        }
    )
    page = obj(
        {
            "events": {"type": "array", "items": ref("Event")},
            "next_after": {"type": "integer", "minimum": 0},
        }
    )
    return {
        "AuditEntry": audit_entry,
        "AuditLog": audit_log,
        "Event": event,
        "EventPage": page,
        **_attention(),
    }


def _attention() -> dict[str, Schema]:
    """The `order.needs_attention` event and the operator's counts."""
    nullable_text = {"type": ["string", "null"]}
    payload = obj(
        {
            "order_id": UUID,
            "reason": {"type": "string", "enum": REASONS},
            "since": TIME,
            "state": {"type": "string", "enum": STATES},
            "step_id": {"oneOf": [UUID, {"type": "null"}]},
            "step_kind": {"type": ["string", "null"], "enum": [*KINDS, None]},
            "step_status": nullable_text,
            "last_error": nullable_text,
        }
    )
    event = obj(
        {
            "event_id": UUID,
            "type": {"type": "string", "const": "order.needs_attention"},
            "order_id": UUID,
            "payload": ref("AttentionPayload"),
            "created_at": TIME,
        }
    )
    per_state = {s: {"type": "integer", "minimum": 0} for s in STATES}
    per_reason = {r: {"type": "integer", "minimum": 0} for r in REASONS}
    counts = obj(
        {
            "total": {"type": "integer", "minimum": 0},
            "by_state": obj(per_state),
            "waiting": {"type": "integer", "minimum": 0},
            "waiting_by_reason": obj(per_reason),
        }
    )
    return {"AttentionPayload": payload, "AttentionEvent": event, "Counts": counts}


def _problems() -> dict[str, Schema]:
    problem = {
        "type": "object",
        "description": "RFC 9457 problem details; `code` is the stable machine-readable name",
        "properties": {
            "type": {"type": "string", "format": "uri"},
            "title": {"type": "string"},
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            "detail": {"type": "string"},
            "code": {"type": "string"},
            "errors": {"type": "array", "items": ref("FieldError")},
            "current_state": {"type": "string", "enum": STATES},
            "requested": {"type": "string"},
            "error_id": {"type": "string"},
        },
        "required": ["type", "title", "status", "detail", "code"],
    }
    field_error = obj({"field": {"type": "string"}, "message": {"type": "string"}})
    status = obj({"status": {"type": "string", "enum": ["ok", "ready"]}})
    return {"Problem": problem, "FieldError": field_error, "Status": status}


def schemas() -> dict[str, Schema]:
    """Every component schema, by name."""
    return {
        **_requests(),
        **_steps(),
        **_order_parts(),
        "Refund": _refund(),
        **_orders(),
        **_feeds(),
        **_problems(),
    }
