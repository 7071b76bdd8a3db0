"""The attention queue's decision: does this change make the order wait for a person, and why.

Which orders wait is `OrderAggregate.attention_reason` (read off the lifecycle). What this
module decides is the edge: a change after which an order waits (or waits for another reason)
stamps the order with the reason and since when, and announces it with an
`order.needs_attention` event in the same transaction; a change after which it no longer waits
clears the stamp, so the order leaves the queue.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import attrs

from orderflow_core.model import Order, OrderAggregate, OutboxEvent
from orderflow_core.states import AttentionReason, StepKind
from orderflow_core.vocabulary import Event

NEEDS_ATTENTION = Event.NEEDS_ATTENTION
log = logging.getLogger("orderflow.attention")


@attrs.frozen
class AttentionUpdate:
    """The order's new attention stamp; `announce` when an event goes out with it."""

    reason: AttentionReason | None
    since: datetime | None
    announce: bool


def decide(stored: Order, after: OrderAggregate, now: datetime) -> AttentionUpdate | None:
    """Compare the stamp the order carries with what the changed aggregate says; None when the
    stamp stays as it is.

    A new reason while the order already waited keeps the original `since`: the person has
    been waited for since then, whatever the reason is now.
    """
    reason = after.attention_reason
    if reason == stored.attention_reason:
        return None
    if reason is None:
        return AttentionUpdate(None, None, announce=False)
    waiting = stored.attention_reason is not None and stored.attention_since is not None
    since = stored.attention_since if waiting else now
    return AttentionUpdate(reason, since, announce=True)


def event_payload(after: OrderAggregate, update: AttentionUpdate) -> dict[str, Any]:
    """What the `order.needs_attention` event says: the reason, since when, the state, and the
    current step that stopped (if one did)."""
    assert update.reason is not None
    assert update.since is not None
    current = after.current_step
    if update.reason is AttentionReason.NOTIFICATION_FAILED:
        current = after.latest(StepKind.NOTIFY_CUSTOMER)  # the step that stopped, after shipped
    return {
        "reason": update.reason.value,
        "since": update.since.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "state": after.order.state.value,
        "step_id": str(current.step_id) if current is not None else None,
        "step_kind": current.kind.value if current is not None else None,
        "step_status": current.status.value if current is not None else None,
        "last_error": current.last_error if current is not None else None,
    }


def log_published(events: Iterable[OutboxEvent]) -> None:
    """A WARNING per published `order.needs_attention` event: the log says who is waited for.

    The relay calls this once the events are in the feed, so a line is never written for a
    change that did not commit.
    """
    for event in events:
        if event.type == NEEDS_ATTENTION:
            payload = event.payload
            log.warning(
                "order %s needs attention: %s (state %s, step %s %s, since %s)",
                event.order_id,
                payload.get("reason"),
                payload.get("state"),
                payload.get("step_kind"),
                payload.get("step_status"),
                payload.get("since"),
                extra={"order_id": str(event.order_id), "step_id": payload.get("step_id")},
            )
