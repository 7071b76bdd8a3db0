"""A scratch copy of an aggregate that a decision edits and then turns into one `Change`."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import attrs

from orderflow_core import attention, ids, process, transitions
from orderflow_core.context import Context
from orderflow_core.model import (
    ApiIdempotency,
    AuditEntry,
    Change,
    Claim,
    HistoryEntry,
    Order,
    OrderAggregate,
    OutboxEvent,
    Refund,
    Step,
)
from orderflow_core.states import DUE_STATUSES, OrderState, StepKind, StepStatus
from orderflow_core.vocabulary import Audit, Event, state_event, step_audit


class Draft:
    """Collects the edits of one decision; `change()` returns them as one atomic `Change`.

    `kinds`: what each step kind says of itself (the step registry's definitions), read to
    stamp why the order waits for a person after the edits.
    """

    def __init__(self, aggregate: OrderAggregate, ctx: Context, kinds: attention.Kinds) -> None:
        self.ctx = ctx
        self.kinds = kinds
        self.order = aggregate.order
        self._order_changed = False
        self._steps = {s.step_id: s for s in aggregate.steps}
        self._refunds = {r.refund_id: r for r in aggregate.refunds}
        self._changed_steps: dict[UUID, Step] = {}
        self._changed_refunds: dict[UUID, Refund] = {}
        self.history: list[HistoryEntry] = []
        self.events: list[OutboxEvent] = []
        self.audit: list[AuditEntry] = []
        self._attention_settled = False

    # -- reading -------------------------------------------------------------------------------
    @property
    def now(self) -> datetime:
        return self.ctx.now

    def step(self, step_id: UUID) -> Step:
        return self._steps[step_id]

    def steps_of(self, kind: StepKind) -> list[Step]:
        return sorted((s for s in self._steps.values() if s.kind is kind), key=lambda s: s.seq)

    def latest(self, kind: StepKind) -> Step | None:
        found = self.steps_of(kind)
        return found[-1] if found else None

    def active(self, kind: StepKind) -> list[Step]:
        """Steps of `kind` that are due or running."""
        return [s for s in self.steps_of(kind) if s.is_due_or_running]

    def new_steps(self, before: OrderAggregate) -> list[Step]:
        """Steps this decision created, in creation order."""
        known = {s.step_id for s in before.steps}
        fresh = (s for s in self._changed_steps.values() if s.step_id not in known)
        return sorted(fresh, key=lambda s: s.seq)

    def refund(self, refund_id: UUID) -> Refund:
        return self._refunds[refund_id]

    @property
    def refunds(self) -> list[Refund]:
        return list(self._refunds.values())

    # -- writing -------------------------------------------------------------------------------
    def set_order(self, **fields: Any) -> None:
        self.order = attrs.evolve(self.order, updated_at=self.now, **fields)
        self._order_changed = True

    def move(self, to: OrderState, reason: str) -> None:
        """Change the order's state through the transition table, with history, event, audit."""
        current = self.order.state
        transitions.check(current, to, self.order.process_version)
        entry = HistoryEntry(
            self.order.order_id,
            self.order.event_seq + 1,
            current,
            to,
            self.now,
            self.ctx.actor,
            reason,
        )
        self.history.append(entry)
        # The state and the event's number change in one copy of the order.
        self._emit(state_event(to), entry.event_payload(), state=to, state_reason=reason)

    def emit(self, event_type: str, payload: dict[str, Any]) -> None:
        self._emit(event_type, payload)

    def _emit(self, event_type: str, payload: dict[str, Any], **order_fields: Any) -> None:
        seq = self.order.event_seq + 1
        self.set_order(event_seq=seq, **order_fields)
        order_id = self.order.order_id
        event_id = ids.event_id(order_id, seq)
        # Every event names who caused it, as audit entries and history do: `<role>:<user>`
        # for a request made with a user's token, the worker's id for an executor's step.
        body = {"order_id": str(order_id), "actor": self.ctx.actor, **payload}
        self.events.append(OutboxEvent(event_id, order_id, event_type, body, self.now))

    def note(self, action: str, outcome: str, step_id: UUID | None = None, **details: Any) -> None:
        self.audit.append(
            AuditEntry(
                self.order.order_id, self.now, self.ctx.actor, action, outcome, step_id, details
            )
        )

    def put_step(self, step: Step) -> Step:
        self._steps[step.step_id] = step
        self._changed_steps[step.step_id] = step
        return step

    def update_step(self, step_id: UUID, **fields: Any) -> Step:
        return self.put_step(attrs.evolve(self._steps[step_id], **fields))

    def put_refund(self, refund: Refund) -> Refund:
        self._refunds[refund.refund_id] = refund
        self._changed_refunds[refund.refund_id] = refund
        return refund

    def new_step(
        self, kind: StepKind, *, delay_s: float = 0.0, refund_id: UUID | None = None
    ) -> Step:
        seq = max((s.seq for s in self._steps.values()), default=0) + 1
        order_id = self.order.order_id
        step = Step(
            step_id=self.ctx.new_id(),
            order_id=order_id,
            kind=kind,
            seq=seq,
            status=StepStatus.PENDING,
            idempotency_key=ids.step_key(order_id, kind.value, seq),
            created_at=self.now,
            max_attempts=self.ctx.timing.retry.attempts_per_budget,
            next_attempt_at=self.now + timedelta(seconds=delay_s),
            refund_id=refund_id,
        )
        return self.put_step(step)

    def advance(self, done: StepKind) -> list[Step]:
        """A `done` step carried the order forward: add the steps the order's process version
        says follow it (`Process.then`), unless one of them is already due or running."""
        follows = process.process_for(self.order.process_version).then.get(done, ())
        return [self.new_step(kind) for kind in follows if not self.active(kind)]

    def cancel_waiting(self, kind: StepKind, reason: str) -> None:
        """Cancel steps of `kind` that wait to run (never one that is running)."""
        for step in self.steps_of(kind):
            if step.status in DUE_STATUSES:
                self.update_step(
                    step.step_id,
                    status=StepStatus.CANCELLED,
                    last_error=reason,
                    next_attempt_at=None,
                )
                self.note(step_audit(StepStatus.CANCELLED), kind.value, step.step_id, reason=reason)

    def rejection(self, claim: Claim, why: str) -> AuditEntry:
        """The audit entry of a result of `claim` that is not stored, and why."""
        return AuditEntry(
            self.order.order_id,
            self.now,
            claim.owner,
            Audit.REJECTED,
            why,
            claim.step_id,
            {"attempt": claim.attempt},
        )

    def change(
        self,
        *,
        claim: Claim | None = None,
        idempotency: ApiIdempotency | None = None,
    ) -> Change:
        self._settle_attention()
        on_reject = self.rejection(claim, "stale_generation") if claim is not None else None
        return Change(
            order=self.order if self._order_changed else None,
            steps=tuple(self._changed_steps.values()),
            refunds=tuple(self._changed_refunds.values()),
            history=tuple(self.history),
            events=tuple(self.events),
            audit=tuple(self.audit),
            idempotency=idempotency,
            guard=claim.guard if claim else None,
            on_reject=on_reject,
        )

    def _settle_attention(self) -> None:
        """Stamp (or clear) the order's attention reason as the edits leave it; a change that
        makes the order wait carries the `order.needs_attention` event (rule 4)."""
        if self._attention_settled:
            return
        self._attention_settled = True
        after = OrderAggregate(
            order=self.order,
            steps=tuple(sorted(self._steps.values(), key=lambda s: s.seq)),
            refunds=tuple(self._refunds.values()),
        )
        update = attention.decide(self.order, after, self.now, self.kinds)
        if update is None:
            return
        self.set_order(attention_reason=update.reason, attention_since=update.since)
        if update.announce:
            self.emit(Event.NEEDS_ATTENTION, attention.event_payload(after, update, self.kinds))


def new_order_draft(order: Order, ctx: Context, kinds: attention.Kinds) -> Draft:
    """A draft for an order that does not exist yet."""
    return Draft(OrderAggregate(order=order), ctx, kinds)
