"""The shapes of the request bodies: which fields, of which JSON types, and nothing else.

Why separate from the core's rules: JSON types (an integer that is not a float, a string, a
boolean) only exist on the wire; the core checks the ranges (quantity 1–1000, …) afterwards.
Every shape error is collected so a client learns all of them from one 422.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orderflow_core.errors import ValidationFailed
from orderflow_core.model import Item

ORDER_FIELDS = frozenset({"items", "currency"})
ITEM_FIELDS = frozenset({"sku", "quantity", "unit_price_minor"})
REFUND_FIELDS = frozenset({"amount_minor", "reason"})
MAX_REASON_LENGTH = 500
# Bounds the work spent on one body even when it is far over the core's 100-item limit.
MAX_ITEM_ERRORS = 100

Errors = list[dict[str, str]]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _object(value: object, where: str, fields: frozenset[str], errors: Errors) -> Mapping[str, Any]:
    """The value as an object whose keys are all known; every unknown key is an error."""
    if not isinstance(value, dict):
        errors.append({"field": where or "body", "message": "must be a JSON object"})
        return {}
    prefix = f"{where}." if where else ""
    for key in sorted(set(value) - fields):
        errors.append({"field": f"{prefix}{key}", "message": "unknown field"})
    return value


def _require(obj: Mapping[str, Any], name: str, where: str, errors: Errors) -> bool:
    if name in obj:
        return True
    errors.append({"field": f"{where}{name}", "message": "is required"})
    return False


def _item(value: object, where: str, errors: Errors) -> Item | None:
    before = len(errors)
    obj = _object(value, where, ITEM_FIELDS, errors)
    if not isinstance(value, dict):
        return None
    prefix = f"{where}."
    if _require(obj, "sku", prefix, errors) and not isinstance(obj["sku"], str):
        errors.append({"field": f"{prefix}sku", "message": "must be a string"})
    for name in ("quantity", "unit_price_minor"):
        if _require(obj, name, prefix, errors) and not _is_int(obj[name]):
            errors.append({"field": f"{prefix}{name}", "message": "must be an integer"})
    if len(errors) > before:
        return None
    return Item(sku=obj["sku"], quantity=obj["quantity"], unit_price_minor=obj["unit_price_minor"])


def create_order(value: object) -> tuple[list[Item], str]:
    """`{"items": [{sku, quantity, unit_price_minor}], "currency"}` with JSON types checked."""
    errors: Errors = []
    obj = _object(value, "", ORDER_FIELDS, errors)
    items: list[Item] = []
    if isinstance(value, dict) and _require(obj, "items", "", errors):
        raw = obj["items"]
        if not isinstance(raw, list):
            errors.append({"field": "items", "message": "must be a JSON array"})
        else:
            for i, line in enumerate(raw):
                if len(errors) >= MAX_ITEM_ERRORS:
                    break
                parsed = _item(line, f"items[{i}]", errors)
                if parsed is not None:
                    items.append(parsed)
    currency = obj.get("currency")
    if (
        isinstance(value, dict)
        and _require(obj, "currency", "", errors)
        and not isinstance(currency, str)
    ):
        errors.append({"field": "currency", "message": "must be a string"})
    if errors:
        raise ValidationFailed(errors)
    return items, str(currency)


def _reason(obj: Mapping[str, Any], errors: Errors) -> str:
    if not _require(obj, "reason", "", errors):
        return ""
    reason = obj["reason"]
    if (
        not isinstance(reason, str)
        or not reason.strip()
        or len(reason) > MAX_REASON_LENGTH
        or not reason.isprintable()
    ):
        message = f"a string of 1-{MAX_REASON_LENGTH} printable characters"
        errors.append({"field": "reason", "message": message})
        return ""
    return reason


def refund(value: object) -> tuple[int | None, str]:
    """`{"amount_minor"?: int, "reason": str}`; the amount's range is the core's to check."""
    errors: Errors = []
    obj = _object(value, "", REFUND_FIELDS, errors)
    amount = obj.get("amount_minor")
    if "amount_minor" in obj and not _is_int(amount):
        errors.append({"field": "amount_minor", "message": "must be an integer"})
    reason = _reason(obj, errors) if isinstance(value, dict) else ""
    if errors:
        raise ValidationFailed(errors)
    return amount, reason
