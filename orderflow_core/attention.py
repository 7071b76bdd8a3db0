"""The attention queue's decision: does this change make the order wait for a person, and why.

Which orders wait is read off their steps by what each step kind says of itself (`KindFacts`,
carried by its definition in orderflow_core/steps/): `current_step` and `reason` below. What
this module decides is the edge: a change after which an order waits (or waits for another reason)
stamps the order with the reason and since when, and announces it with an
`order.needs_attention` event in the same transaction; a change after which it no longer waits
clears the stamp, so the order leaves the queue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

import attrs

from orderflow_core.model import Order, OrderAggregate, OutboxEvent, Step
from orderflow_core.states import AttentionReason, StepKind, StepStatus
from orderflow_core.vocabulary import Event

NEEDS_ATTENTION = Event.NEEDS_ATTENTION
log = logging.getLogger("orderflow.attention")

Attention = Callable[[OrderAggregate, Step], AttentionReason | None]


class KindFacts(Protocol):
    """What a step kind says of the orders it runs in (a `StepDefinition` is one).

    `mainline`: its steps carry the order forward, so the newest of them is the order's current
    step. `outlives_order`: it runs after the order ended, and a stop of it makes even an ended
    order wait. `attention`: why an order waits whose current (or outliving) step is this one,
    or None if something will move it by itself.
    """

    @property
    def mainline(self) -> bool: ...

    @property
    def outlives_order(self) -> bool: ...

    @property
    def attention(self) -> Attention: ...


Kinds = Mapping[StepKind, KindFacts]


def stopped(aggregate: OrderAggregate, step: Step) -> AttentionReason | None:
    """The usual reason: a blocked step waits as `blocked`, a failed one as
    `retries_exhausted`; any other waits for nobody."""
    del aggregate
    if step.status is StepStatus.BLOCKED:
        return AttentionReason.BLOCKED
    if step.status is StepStatus.FAILED:
        return AttentionReason.RETRIES_EXHAUSTED
    return None


def current_step(aggregate: OrderAggregate, kinds: Kinds) -> Step | None:
    """The newest mainline step that was not cancelled (or the newest at all)."""
    mainline = [s for s in aggregate.steps if kinds[s.kind].mainline]
    mainline.sort(key=lambda s: s.seq)
    live = [s for s in mainline if s.status is not StepStatus.CANCELLED]
    if live:
        return live[-1]
    return mainline[-1] if mainline else None


def waiting_step(aggregate: OrderAggregate, kinds: Kinds) -> Step | None:
    """The step a person would act on: a stopped step of a kind that outlives the order, else
    (while the order lives) its current step; None for an ended order with none."""
    for kind in sorted({s.kind for s in aggregate.steps if kinds[s.kind].outlives_order}):
        latest = aggregate.latest(kind)
        if latest is not None and latest.is_stopped:
            return latest
    if aggregate.order.is_terminal:
        return None
    return current_step(aggregate, kinds)


def reason(aggregate: OrderAggregate, kinds: Kinds) -> AttentionReason | None:
    """Why nothing will move this order until a person acts, or None if something will
    (docs/lifecycle.md): what the kind of the step it waits on says."""
    step = waiting_step(aggregate, kinds)
    return kinds[step.kind].attention(aggregate, step) if step is not None else None


@attrs.frozen
class AttentionUpdate:
    """The order's new attention stamp; `announce` when an event goes out with it."""

    reason: AttentionReason | None
    since: datetime | None
    announce: bool


def decide(
    stored: Order, after: OrderAggregate, now: datetime, kinds: Kinds
) -> AttentionUpdate | None:
    """Compare the stamp the order carries with what the changed aggregate says; None when the
    stamp stays as it is.

    A new reason while the order already waited keeps the original `since`: the person has
    been waited for since then, whatever the reason is now.
    """
    now_waits = reason(after, kinds)
    if now_waits == stored.attention_reason:
        return None
    if now_waits is None:
        return AttentionUpdate(None, None, announce=False)
    waiting = stored.attention_reason is not None and stored.attention_since is not None
    since = stored.attention_since if waiting else now
    return AttentionUpdate(now_waits, since, announce=True)


def event_payload(after: OrderAggregate, update: AttentionUpdate, kinds: Kinds) -> dict[str, Any]:
    """What the `order.needs_attention` event says: the reason, since when, the state, and the
    step it waits on (if one)."""
    assert update.reason is not None
    assert update.since is not None
    current = waiting_step(after, kinds)
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
