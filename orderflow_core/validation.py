"""Input rules of the API that hold whatever the transport: items, keys, amounts."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from orderflow_core.errors import IdempotencyKeyRequired, InvalidIdempotencyKey, ValidationFailed
from orderflow_core.model import Item

MAX_ITEMS = 100
MAX_SKU_LENGTH = 64
MAX_QUANTITY = 1000
MAX_UNIT_PRICE_MINOR = 10**12
CURRENCIES = frozenset({"RUB"})


def check_idempotency_key(key: str | None) -> str:
    """Return the key if it is 1–255 visible ASCII characters (no spaces, no controls)."""
    if key is None:
        raise IdempotencyKeyRequired("header Idempotency-Key is required")
    if not 1 <= len(key) <= 255 or not all("!" <= ch <= "~" for ch in key):
        raise InvalidIdempotencyKey("Idempotency-Key must be 1-255 visible ASCII characters")
    return key


MAX_REASON_LENGTH = 500


def check_refund_reason(reason: str) -> None:
    """A refund's reason is 1–500 printable characters (it lands in the audit log)."""
    if (
        not isinstance(reason, str)
        or not 1 <= len(reason) <= MAX_REASON_LENGTH
        or (not reason.isprintable())
    ):
        raise ValidationFailed([{"field": "reason", "message": "1-500 printable characters"}])


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_items(items: Sequence[Item], currency: str) -> None:
    """Raise `ValidationFailed` listing every broken rule."""
    errors: list[dict[str, str]] = []
    if currency not in CURRENCIES:
        errors.append({"field": "currency", "message": "only RUB is supported"})
    if not 1 <= len(items) <= MAX_ITEMS:
        errors.append({"field": "items", "message": f"between 1 and {MAX_ITEMS} items"})
    for i, item in enumerate(items[:MAX_ITEMS]):
        errors.extend(_item_errors(f"items[{i}]", item))
    if not errors and items and sum(i.quantity * i.unit_price_minor for i in items) == 0:
        # Free items are fine, a free order is not: the payments service charges positive
        # amounts only, so a total of 0 could never be paid (it would wait out the hold).
        errors.append({"field": "items", "message": "the order total must be above 0"})
    if errors:
        raise ValidationFailed(errors)


def _item_errors(where: str, item: Item) -> list[dict[str, str]]:
    errors = []
    sku = item.sku
    if not isinstance(sku, str) or not 1 <= len(sku) <= MAX_SKU_LENGTH or not sku.isprintable():
        errors.append({"field": f"{where}.sku", "message": "1-64 printable characters"})
    if not _is_int(item.quantity) or not 1 <= item.quantity <= MAX_QUANTITY:
        errors.append({"field": f"{where}.quantity", "message": "an integer from 1 to 1000"})
    price = item.unit_price_minor
    if not _is_int(price) or not 0 <= price <= MAX_UNIT_PRICE_MINOR:
        errors.append(
            {"field": f"{where}.unit_price_minor", "message": "an integer from 0 to 10^12"}
        )
    return errors


def fingerprint(payload: object) -> str:
    """A stable digest of a request, to tell a replay from a reused key."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()
