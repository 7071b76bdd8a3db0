"""The use cases: each loads, decides with the pure functions, commits through the store."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from uuid import UUID

import attrs

from orderflow_core import commands, ids, observe
from orderflow_core.context import Context, Timing
from orderflow_core.errors import (
    DuplicateIdempotencyKey,
    Forbidden,
    IdempotencyKeyReused,
    InvalidParameter,
    NotFound,
    OrderflowError,
    Unauthenticated,
)
from orderflow_core.model import (
    ApiIdempotency,
    AuditEntry,
    HistoryEntry,
    Item,
    Order,
    OrderAggregate,
    OutboxEvent,
    Principal,
    Refund,
)
from orderflow_core.ports import Clock, OrderCount, OrderStore, Users
from orderflow_core.process import NEWEST, process_for
from orderflow_core.states import OrderState, Role
from orderflow_core.validation import (
    check_idempotency_key,
    check_items,
    check_refund_reason,
    fingerprint,
)

_BOTH = frozenset({Role.CUSTOMER, Role.OPERATOR})
# Which roles may ask for each use case. Checked before anything else of a request is looked
# at (its headers, its body), so a caller learns first that it may not do this at all.
ROLES: Mapping[str, frozenset[Role]] = {
    "create_order": frozenset({Role.CUSTOMER}),
    "get_order": _BOTH,
    "list_orders": _BOTH,
    "cancel": frozenset({Role.CUSTOMER}),
    "retry": _BOTH,
    "reconcile": frozenset({Role.OPERATOR}),
    "request_refund": frozenset({Role.OPERATOR}),
    "audit": frozenset({Role.OPERATOR}),
    "events": frozenset({Role.OPERATOR}),
    "order_counts": frozenset({Role.OPERATOR}),
}


# What a person may ask of an order (the order representation's `allowed_actions`), with the
# use case (a key of `ROLES`) each one is.
ACTIONS: Mapping[str, str] = {
    "cancel": "cancel",
    "retry": "retry",
    "reconcile": "reconcile",
    "refund": "request_refund",
}


@attrs.frozen
class OrderView:
    """An order as a reader sees it: the aggregate plus its history, and the actions the
    reader may ask for now (`allowed_actions`)."""

    aggregate: OrderAggregate
    history: tuple[HistoryEntry, ...]
    allowed_actions: tuple[str, ...] = ()


def allowed_actions(aggregate: OrderAggregate, principal: Principal) -> tuple[str, ...]:
    """The actions `principal` may ask of the order now: those its role may ask for (`ROLES`)
    that pass the checks the commands themselves make first (`commands.cancel_at`, `retry_of`,
    `check_reconcile`, `check_refund`), so this never disagrees with what a request would get.
    An action that would change nothing (cancelling a cancelled order, refunding what is all
    refunded) is not listed."""
    checks: dict[str, Callable[[], object]] = {
        "cancel": lambda: commands.cancel_at(aggregate),
        "retry": lambda: commands.retry_of(aggregate, principal),
        "reconcile": lambda: commands.check_reconcile(aggregate),
        "refund": lambda: commands.check_refund(aggregate, None),
    }
    allowed = []
    for action, use_case in ACTIONS.items():
        if principal.role in ROLES[use_case] and _passes(checks[action]):
            allowed.append(action)
    return tuple(allowed)


def _passes(check: Callable[[], object]) -> bool:
    try:
        check()
    except OrderflowError:
        return False
    return True


def hash_token(token: str) -> str:
    """Only this digest of a bearer token is ever stored."""
    return hashlib.sha256(token.encode()).hexdigest()


class OrderService:
    """Create, read, cancel, retry, reconcile and refund orders, with roles enforced."""

    def __init__(
        self,
        store: OrderStore,
        clock: Clock,
        users: Users,
        *,
        timing: Timing | None = None,
        new_id: Callable[[], UUID] = ids.uuid7,
        process_version: int = NEWEST,
        keyed_order_ids: bool = False,
    ) -> None:
        self._process_version = process_for(process_version).version
        self._store = store
        self._clock = clock
        self._users = users
        self._timing = timing or Timing()
        self._new_id = new_id
        # On a store distributed by order a create's order takes the id its idempotency key
        # gives (`ids.keyed_order_id`), so the order and the key are written on one shard.
        self._keyed_order_ids = keyed_order_ids

    def _ctx(self, principal: Principal) -> Context:
        actor = f"{principal.role.value}:{principal.user_id}"
        return Context(self._clock.now(), actor, self._timing, self._new_id)

    async def authenticate(self, token: str | None) -> Principal:
        """The principal a bearer token belongs to, or `Unauthenticated`."""
        if not token:
            raise Unauthenticated("a bearer token is required")
        if not all("!" <= ch <= "~" for ch in token):
            raise Unauthenticated("unknown token")
        digest = hash_token(token)
        principal = await self._users.principal_for_token_hash(digest)
        # The lookup is by digest; compare again in constant time so timing tells nothing.
        if principal is None or not hmac.compare_digest(digest, hash_token(token)):
            raise Unauthenticated("unknown token")
        return principal

    def authorize(self, principal: Principal, operation: str) -> None:
        """`Forbidden` unless the principal's role may ask for `operation` (a key of `ROLES`).

        Every use case checks this itself; an adapter calls it first to refuse a caller
        before reading the rest of the request.
        """
        allowed = ROLES[operation]
        if principal.role not in allowed:
            names = " or the ".join(sorted(r.value for r in allowed))
            raise Forbidden(f"this needs the {names} role")

    async def authorize_on_order(
        self, principal: Principal, operation: str, order_id: UUID
    ) -> None:
        """`authorize` for a question about one order. A customer refused an operator's
        question gets 403 about their own order but 404 about anyone else's: a customer learns
        nothing of other customers' orders, not even that they exist."""
        if principal.role not in ROLES[operation] and principal.role is Role.CUSTOMER:
            await self._visible(principal, order_id)
        self.authorize(principal, operation)

    async def create_order(
        self, principal: Principal, key: str | None, items: Sequence[Item], currency: str
    ) -> tuple[OrderView, bool]:
        """Create once per (user, key); a replay returns the same order and `True`."""
        self.authorize(principal, "create_order")
        key = check_idempotency_key(key)
        check_items(items, currency)
        digest = fingerprint({"items": [attrs.asdict(i) for i in items], "currency": currency})
        ctx = self._ctx(principal)
        order_id = (
            ids.keyed_order_id(principal.user_id, key) if self._keyed_order_ids else self._new_id()
        )
        idem = ApiIdempotency(principal.user_id, "create_order", key, digest, order_id, ctx.now)
        trace_parent = observe.request_trace_parent.get()
        change = commands.create_order(
            principal, items, currency, idem, ctx, trace_parent, self._process_version
        )
        try:
            # Insert first: the store's unique key decides, and the common case costs one trip.
            await self._store.create(change)
        except DuplicateIdempotencyKey:
            replay = await self._replay(principal, "create_order", key, digest)
            if replay is None:
                raise
            return await self._view(replay, principal), True
        assert change.order is not None
        created = OrderAggregate(change.order, change.steps, change.refunds)
        actions = allowed_actions(created, principal)
        return OrderView(created, change.history, actions), False

    async def _replay(self, principal: Principal, scope: str, key: str, digest: str) -> UUID | None:
        found = await self._store.find_idempotency(principal.user_id, scope, key)
        if found is None:
            return None
        if not hmac.compare_digest(found.fingerprint, digest):
            raise IdempotencyKeyReused("this Idempotency-Key was used with a different request")
        return found.resource_id

    async def _view(self, order_id: UUID, principal: Principal) -> OrderView:
        # One read: the order and its history as of one moment, never two moments apart.
        found = await self._store.load_with_history(order_id)
        if found is None:
            raise NotFound(f"order {order_id} not found")
        aggregate, history = found
        actions = allowed_actions(aggregate, principal)
        return OrderView(aggregate, tuple(history), actions)

    async def _visible(self, principal: Principal, order_id: UUID) -> OrderAggregate:
        aggregate = await self._store.load(order_id)
        if aggregate is None or (
            principal.role is Role.CUSTOMER and aggregate.order.customer_id != principal.user_id
        ):
            raise NotFound(f"order {order_id} not found")
        return aggregate

    async def get_order(self, principal: Principal, order_id: UUID) -> OrderView:
        """The order with history, steps, payment and refunds; owners and operators only."""
        self.authorize(principal, "get_order")
        view = await self._view(order_id, principal)
        owner = view.aggregate.order.customer_id
        if principal.role is Role.CUSTOMER and owner != principal.user_id:
            raise NotFound(f"order {order_id} not found")
        return view

    async def list_orders(
        self, principal: Principal, *, state: str | None, limit: int, cursor: str | None
    ) -> tuple[list[Order], str | None]:
        """Newest first, a page at a time; customers see their own orders only."""
        self.authorize(principal, "list_orders")
        if not 1 <= limit <= 100:
            raise InvalidParameter("limit must be an integer from 1 to 100")
        wanted = _parse_state(state)
        before = decode_cursor(cursor) if cursor else None
        customer = principal.user_id if principal.role is Role.CUSTOMER else None
        orders = await self._store.list_orders(
            customer_id=customer, state=wanted, limit=limit + 1, before=before
        )
        page = orders[:limit]
        more = len(orders) > limit
        return page, encode_cursor(page[-1]) if more and page else None

    async def waiting_orders(
        self, principal: Principal, *, state: str | None, limit: int, cursor: str | None
    ) -> tuple[list[Order], str | None]:
        """The attention queue: orders waiting for a person, newest waiting first, a page at a
        time; customers see their own only."""
        if not 1 <= limit <= 100:
            raise InvalidParameter("limit must be an integer from 1 to 100")
        wanted = _parse_state(state)
        before = decode_cursor(cursor) if cursor else None
        customer = principal.user_id if principal.role is Role.CUSTOMER else None
        orders = await self._store.list_waiting(
            customer_id=customer, state=wanted, limit=limit + 1, before=before
        )
        page = orders[:limit]
        last = page[-1] if len(orders) > limit else None
        if last is None or last.attention_since is None:
            return page, None
        return page, _cursor(last.attention_since, last.order_id)

    async def order_counts(self, principal: Principal) -> list[OrderCount]:
        """How many orders are in each state and wait for each reason (operator)."""
        self.authorize(principal, "order_counts")
        return await self._store.count_orders()

    async def cancel(self, principal: Principal, order_id: UUID) -> tuple[OrderView, str]:
        """Cancel per the table; the result says `cancelled`, `cancelling` or `unchanged`."""
        self.authorize(principal, "cancel")
        await self._visible(principal, order_id)
        result = await self._store.update(
            order_id, lambda agg: commands.cancel(agg, self._ctx(principal))
        )
        return await self._view(order_id, principal), result

    async def retry(self, principal: Principal, order_id: UUID) -> OrderView:
        """Re-arm the current step (same key, a fresh budget of attempts)."""
        self.authorize(principal, "retry")
        await self._visible(principal, order_id)
        await self._store.update(
            order_id, lambda agg: (commands.retry(agg, principal, self._ctx(principal)), None)
        )
        return await self._view(order_id, principal)

    async def reconcile(self, principal: Principal, order_id: UUID) -> OrderView:
        """Queue a status check with the charge's key (operator, payment_unknown only)."""
        await self.authorize_on_order(principal, "reconcile", order_id)
        await self._visible(principal, order_id)
        await self._store.update(
            order_id, lambda agg: (commands.reconcile(agg, principal, self._ctx(principal)), None)
        )
        return await self._view(order_id, principal)

    async def request_refund(
        self,
        principal: Principal,
        order_id: UUID,
        key: str | None,
        amount_minor: int | None,
        reason: str,
    ) -> tuple[Refund, bool]:
        """A refund of a confirmed charge under the operator's idempotency key."""
        await self.authorize_on_order(principal, "request_refund", order_id)
        key = check_idempotency_key(key)
        check_refund_reason(reason)
        await self._visible(principal, order_id)
        scope = f"refund:{order_id}"
        digest = fingerprint({"amount_minor": amount_minor, "reason": reason})
        replayed = await self._replay(principal, scope, key, digest)
        if replayed is None:
            ctx = self._ctx(principal)
            idem = ApiIdempotency(principal.user_id, scope, key, digest, self._new_id(), ctx.now)
            try:
                replayed = await self._store.update(
                    order_id,
                    lambda agg: commands.request_refund(
                        agg, principal, amount_minor, reason, idem, ctx
                    ),
                )
            except DuplicateIdempotencyKey:
                replayed = await self._replay(principal, scope, key, digest)
                if replayed is None:
                    raise
            else:
                return await self._refund(order_id, replayed), False
        return await self._refund(order_id, replayed), True

    async def _refund(self, order_id: UUID, refund_id: UUID) -> Refund:
        aggregate = await self._store.load(order_id)
        refund = aggregate.refund(refund_id) if aggregate else None
        if refund is None:
            raise NotFound(f"refund {refund_id} not found")
        return refund

    async def audit(self, principal: Principal, order_id: UUID) -> list[AuditEntry]:
        """The order's audit log, oldest first (operator)."""
        await self.authorize_on_order(principal, "audit", order_id)
        await self._visible(principal, order_id)
        return await self._store.audit_entries(order_id)

    async def events(self, principal: Principal, *, after: int, limit: int) -> list[OutboxEvent]:
        """The outbox feed, oldest first (operator)."""
        self.authorize(principal, "events")
        if after < 0:
            raise InvalidParameter("after must be a non-negative integer")
        if not 1 <= limit <= 1000:
            raise InvalidParameter("limit must be an integer from 1 to 1000")
        return await self._store.events(after=after, limit=limit)


def _parse_state(state: str | None) -> OrderState | None:
    if state is None:
        return None
    try:
        return OrderState(state)
    except ValueError:
        raise InvalidParameter(f"unknown state {state!r}") from None


def encode_cursor(order: Order) -> str:
    """An opaque keyset cursor: the last row's (created_at, order_id)."""
    return _cursor(order.created_at, order.order_id)


def _cursor(stamp: datetime, order_id: UUID) -> str:
    raw = f"{stamp.isoformat()}|{order_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    """Parse a cursor made by `encode_cursor`, or raise `InvalidParameter`."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, order_id = raw.split("|")
        when = datetime.fromisoformat(stamp)
        if when.tzinfo is None:
            raise ValueError("naive time")
        return when, UUID(order_id)
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise InvalidParameter("cursor is not valid") from None
