"""One behaviour suite, run against the in-memory store and PostgreSQL: the fake cannot drift."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import psycopg
import pytest
from builders import (
    T0,
    at,
    audit,
    creation,
    event,
    idempotency,
    new_order,
    new_step,
    reserved_change,
)
from conftest import Run

from orderflow_core import saga
from orderflow_core.commits import update_each
from orderflow_core.context import Context
from orderflow_core.errors import DuplicateIdempotencyKey, NotFound
from orderflow_core.model import Change, Claim, Order, OrderAggregate, OutboxEvent, Refund
from orderflow_core.ports import (
    ClaimsWithStarts,
    GroupCommits,
    OrderReads,
    OrderStore,
    UnitOfWork,
)
from orderflow_core.relay import OutboxFeed
from orderflow_core.states import OrderState, RefundStatus, StepKind, StepStatus
from orderflow_core.steps.definition import CallPlan
from orderflow_core.testing import InMemoryOrderStore


@pytest.fixture(
    params=[
        "memory",
        pytest.param("postgres", marks=pytest.mark.postgres),
        # The same store without its optimisations, so the plain path stays tested.
        pytest.param("postgres-plain", marks=pytest.mark.postgres),
        pytest.param("citus", marks=pytest.mark.citus),
    ]
)
def store(request: pytest.FixtureRequest) -> OrderStore:
    if request.param == "memory":
        return InMemoryOrderStore()
    fixture = {"citus": "citus_store", "postgres-plain": "pg_plain_store"}
    pg_store: OrderStore = request.getfixturevalue(fixture.get(request.param, "pg_store"))
    return pg_store


def _members(protocol: type) -> set[str]:
    return {n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")}


def test_both_stores_provide_the_unit_of_work_the_reads_and_the_outbox_feed(
    store: OrderStore,
) -> None:
    for protocol in (UnitOfWork, OrderReads, OutboxFeed):
        assert _members(protocol), protocol
        missing = {n for n in _members(protocol) if not callable(getattr(store, n, None))}
        assert missing == set(), (protocol.__name__, missing)
    assert _members(OrderStore) <= _members(UnitOfWork) | _members(OrderReads)


async def _group_commit(store: OrderStore, updates: Any) -> list[Any]:
    """A group commit as the executor's writer sends it: one `update_many` when the store
    offers it, else each `update` in turn (the contract alone: the in-memory store)."""
    if isinstance(store, GroupCommits):
        return await store.update_many(updates)
    return await update_each(store, list(updates))


def test_a_store_offers_the_batched_writes_only_with_its_optimisations(
    store: OrderStore, request: pytest.FixtureRequest
) -> None:
    batched = request.node.callspec.params["store"] in ("postgres", "citus")
    assert isinstance(store, GroupCommits) is batched
    assert isinstance(store, ClaimsWithStarts) is batched


def unchanged(aggregate: OrderAggregate) -> tuple[Change, None]:
    return Change(), None


def test_a_created_order_reads_back_exactly_as_written(store: OrderStore, run: Run[Any]) -> None:
    order = new_order()
    change = creation(order)
    run(store.create(change))
    loaded = run(store.load(order.order_id))
    assert loaded == OrderAggregate(order=order, steps=change.steps)
    assert run(store.history(order.order_id)) == list(change.history)
    assert run(store.audit_entries(order.order_id)) == list(change.audit)
    assert feed(store, run, after=0, limit=10) == [attrs.evolve(change.events[0], seq=1)]
    key = change.idempotency
    assert key is not None
    assert run(store.find_idempotency(key.user_id, key.scope, key.key)) == key


def test_a_reused_idempotency_key_is_refused_and_nothing_is_written(
    store: OrderStore, run: Run[Any]
) -> None:
    run(store.create(creation(new_order())))
    second = new_order()
    with pytest.raises(DuplicateIdempotencyKey):
        run(store.create(creation(second)))
    assert run(store.load(second.order_id)) is None
    assert len(feed(store, run, after=0, limit=10)) == 1


def test_two_concurrent_creates_with_one_key_make_exactly_one_order(
    store: OrderStore, run: Run[Any]
) -> None:
    first, second = new_order(), new_order()

    async def both() -> list[BaseException | None]:
        changes = (creation(first), creation(second))
        return await asyncio.gather(*(store.create(c) for c in changes), return_exceptions=True)

    results = run(both())
    assert sorted(type(r).__name__ for r in results) == ["DuplicateIdempotencyKey", "NoneType"]
    loaded = [run(store.load(o.order_id)) for o in (first, second)]
    assert sum(a is not None for a in loaded) == 1


def test_an_unknown_order_cannot_be_updated(store: OrderStore, run: Run[Any]) -> None:
    with pytest.raises(NotFound):
        run(store.update(uuid.uuid4(), unchanged))


def test_an_update_applies_every_part_of_the_change_and_returns_the_value(
    store: OrderStore, run: Run[Any]
) -> None:
    order = new_order()
    run(store.create(creation(order, key=None)))
    [claim] = run(store.claim_due(owner="w1", now=T0, limit=5, lease_s=30))
    step = run(store.load(order.order_id)).steps[0]
    change = reserved_change(order, step, claim, worker="w1")
    refund = Refund(
        refund_id=uuid.uuid4(),
        order_id=order.order_id,
        amount_minor=100,
        reason="goodwill",
        status=RefundStatus.REQUESTED,
        requested_by="operator",
        created_at=at(5),
        updated_at=at(5),
        step_id=change.steps[1].step_id,
    )
    processed = uuid.uuid4()
    change = attrs.evolve(change, refunds=(refund,), processed_event_id=processed)
    assert run(store.update(order.order_id, lambda _: (change, "decided"))) == "decided"
    loaded = run(store.load(order.order_id))
    assert loaded == OrderAggregate(order=change.order, steps=change.steps, refunds=(refund,))
    assert run(store.history(order.order_id))[-1] == change.history[0]
    assert run(store.audit_entries(order.order_id))[-1] == change.audit[0]
    assert [e.type for e in feed(store, run, after=0, limit=10)] == [
        "order.created",
        "order.reserved",
    ]


def test_a_change_under_a_lost_generation_writes_only_its_rejection(
    store: OrderStore, run: Run[Any]
) -> None:
    order = new_order()
    run(store.create(creation(order, key=None)))
    [claim_a] = run(store.claim_due(owner="A", now=T0, limit=5, lease_s=30))
    step = run(store.load(order.order_id)).steps[0]
    [claim_b] = run(store.claim_due(owner="B", now=at(31), limit=5, lease_s=30))
    assert claim_b.attempt == claim_a.attempt + 1
    change_b = reserved_change(order, step, claim_b, worker="B")
    run(store.update(order.order_id, lambda _: (change_b, None)))
    change_a = reserved_change(order, step, claim_a, worker="A")
    run(store.update(order.order_id, lambda _: (change_a, None)))
    loaded = run(store.load(order.order_id))
    assert loaded.steps[0].result == {"reservation_id": "r-1", "by": "B"}
    assert [a.worker for a in loaded.steps[0].attempts] == ["B"]
    assert [h.actor for h in run(store.history(order.order_id))] == ["alice", "B"]
    assert len(feed(store, run, after=0, limit=10)) == 2
    assert run(store.audit_entries(order.order_id))[-1] == change_a.on_reject


def test_a_change_with_an_already_processed_event_id_is_a_no_op(
    store: OrderStore, run: Run[Any]
) -> None:
    order = new_order()
    run(store.create(creation(order, key=None)))
    processed = uuid.uuid4()
    for state in (OrderState.RESERVING, OrderState.CANCELLED):
        moved = attrs.evolve(order, state=state)
        change = Change(order=moved, audit=(audit(moved, "x"),), processed_event_id=processed)
        run(store.update(order.order_id, lambda _, c=change: (c, None)))
    assert run(store.load(order.order_id)).order.state is OrderState.RESERVING
    assert len(run(store.audit_entries(order.order_id))) == 2


def test_a_replayed_event_id_reaches_the_outbox_once(store: OrderStore, run: Run[Any]) -> None:
    order = new_order()
    run(store.create(creation(order, key=None)))
    poked = attrs.evolve(order, event_seq=order.event_seq + 1)
    same = Change(order=poked, events=(event(poked, "order.poked"),))
    for _ in range(2):
        run(store.update(order.order_id, lambda _: (same, None)))
    assert [e.type for e in feed(store, run, after=0, limit=10)] == ["order.created", "order.poked"]


def test_an_update_reusing_an_idempotency_key_is_refused_and_writes_nothing(
    store: OrderStore, run: Run[Any]
) -> None:
    order = new_order()
    run(store.create(creation(order, key="k")))
    moved = attrs.evolve(order, state=OrderState.CANCELLED)
    change = Change(order=moved, idempotency=idempotency(order, "k"))
    with pytest.raises(DuplicateIdempotencyKey):
        run(store.update(order.order_id, lambda _: (change, None)))
    assert run(store.load(order.order_id)).order.state is OrderState.CREATED


# A trigger on the audit rows (written after the order's row in the same statement) that
# raises: a real failure midway through a transition's writes, not a hook in the store.
FAIL_AFTER_ORDER_WRITE = """
CREATE FUNCTION fail_injected() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'injected';
END;
$$;
CREATE TRIGGER fail_injected BEFORE INSERT ON audit_log
    FOR EACH ROW EXECUTE FUNCTION fail_injected();
"""


def test_a_failure_between_the_writes_of_a_transition_leaves_nothing_visible(
    store: OrderStore, run: Run[Any], request: pytest.FixtureRequest
) -> None:
    order = new_order()
    run(store.create(creation(order, key=None)))
    [claim] = run(store.claim_due(owner="w1", now=T0, limit=5, lease_s=30))
    before = run(store.load(order.order_id))
    change = reserved_change(order, before.steps[0], claim, worker="w1")
    if isinstance(store, InMemoryOrderStore):  # the fake's own hook
        store.fail_after_order_write = RuntimeError("injected")
    else:  # PostgreSQL fails the statement itself once it has written the order
        citus = getattr(store, "distributed", False)
        pg_url: str = request.getfixturevalue("citus_url" if citus else "pg_url")
        with psycopg.connect(pg_url, autocommit=True) as conn:
            if citus:  # a trigger on a distributed table, carried to its shards (one by one)
                conn.execute("SET citus.enable_unsafe_triggers = on")
                function, trigger = FAIL_AFTER_ORDER_WRITE.split("CREATE TRIGGER")
                conn.execute(function)
                conn.execute("CREATE TRIGGER" + trigger)
            else:
                conn.execute(FAIL_AFTER_ORDER_WRITE)
    try:
        with pytest.raises(Exception, match="injected"):
            run(store.update(order.order_id, lambda _: (change, None)))
    finally:  # the Citus database outlives the test (emptied, not dropped)
        if getattr(store, "distributed", False):
            with psycopg.connect(pg_url, autocommit=True) as conn:
                conn.execute("SET citus.enable_unsafe_triggers = on")
                conn.execute("DROP TRIGGER fail_injected ON audit_log")
                conn.execute("DROP FUNCTION fail_injected()")
    assert run(store.load(order.order_id)) == before
    assert len(run(store.history(order.order_id))) == 1
    assert len(run(store.audit_entries(order.order_id))) == 1
    assert len(feed(store, run, after=0, limit=10)) == 1


def test_claim_takes_due_and_lease_expired_steps_and_leaves_the_rest(
    store: OrderStore, run: Run[Any]
) -> None:
    due, later, done = new_order(), new_order(), new_order()
    run(store.create(creation(due, key=None, due=T0)))
    run(store.create(creation(later, key=None, due=at(60))))
    finished = new_step(done, status=StepStatus.SUCCEEDED, due=None)
    run(store.create(Change(order=done, steps=(finished,))))
    [claim] = run(store.claim_due(owner="A", now=at(1), limit=10, lease_s=30))
    assert (claim.order_id, claim.attempt, claim.owner) == (due.order_id, 1, "A")
    assert claim.lease_expires_at == at(31)
    step = run(store.load(due.order_id)).steps[0]
    assert (step.status, step.attempt, step.lease_owner) == (StepStatus.RUNNING, 1, "A")
    assert run(store.claim_due(owner="B", now=at(30), limit=10, lease_s=30)) == []
    claims = run(store.claim_due(owner="B", now=at(61), limit=10, lease_s=30))
    assert sorted((c.order_id, c.attempt) for c in claims) == sorted(
        [(due.order_id, 2), (later.order_id, 1)]
    )


def test_claim_takes_the_longest_due_steps_first(store: OrderStore, run: Run[Any]) -> None:
    orders = [new_order() for _ in range(3)]
    for order, due in zip(orders, (at(3), at(1), at(2)), strict=True):
        run(store.create(creation(order, key=None, due=due)))
    claims = run(store.claim_due(owner="A", now=at(5), limit=2, lease_s=30))
    assert [c.order_id for c in claims] == [orders[1].order_id, orders[2].order_id]


def test_an_order_with_only_finished_steps_is_claimed_again_once_a_new_step_is_due(
    store: OrderStore, run: Run[Any]
) -> None:
    done = new_order()
    finished = new_step(done, status=StepStatus.SUCCEEDED, due=None)
    run(store.create(Change(order=done, steps=(finished,))))
    assert run(store.claim_due(owner="A", now=at(1), limit=10, lease_s=30)) == []
    release = new_step(done, kind=StepKind.RELEASE_RESERVATION, seq=2, due=at(2))
    run(store.update(done.order_id, lambda _: (Change(steps=(release,)), None)))
    claims = run(store.claim_due(owner="A", now=at(3), limit=10, lease_s=30))
    assert [(c.step_id, c.attempt) for c in claims] == [(release.step_id, 1)]


def test_claim_hands_out_at_most_limit_steps(store: OrderStore, run: Run[Any]) -> None:
    created(store, run, 5)
    assert len(run(store.claim_due(owner="A", now=T0, limit=3, lease_s=30))) == 3
    assert len(run(store.claim_due(owner="B", now=T0, limit=3, lease_s=30))) == 2


def test_a_lease_is_renewed_only_by_its_holder_before_it_expires(
    store: OrderStore, run: Run[Any]
) -> None:
    order = new_order()
    run(store.create(creation(order, key=None)))
    [claim] = run(store.claim_due(owner="A", now=T0, limit=1, lease_s=30))
    assert run(store.renew_lease(claim, now=at(10), lease_s=30)) is True
    assert run(store.load(order.order_id)).steps[0].lease_expires_at == at(40)
    assert run(store.renew_lease(attrs.evolve(claim, owner="B"), now=at(11), lease_s=30)) is False
    assert run(store.renew_lease(attrs.evolve(claim, attempt=2), now=at(11), lease_s=30)) is False
    assert run(store.renew_lease(claim, now=at(40), lease_s=30)) is False


def test_orders_are_listed_newest_first_in_keyset_pages_with_filters(
    store: OrderStore, run: Run[Any]
) -> None:
    orders = [new_order(customer=c, created=at(i)) for i, c in enumerate("ababa")]
    for order in orders:
        run(store.create(creation(order, key=None)))
    newest_first = [o.order_id for o in reversed(orders)]
    page = run(store.list_orders(customer_id=None, state=None, limit=2, before=None))
    assert [o.order_id for o in page] == newest_first[:2]
    cursor = (page[-1].created_at, page[-1].order_id)
    page = run(store.list_orders(customer_id=None, state=None, limit=10, before=cursor))
    assert [o.order_id for o in page] == newest_first[2:]
    only_b = run(store.list_orders(customer_id="b", state=None, limit=10, before=None))
    assert [o.order_id for o in only_b] == [orders[3].order_id, orders[1].order_id]
    shipped = run(
        store.list_orders(customer_id=None, state=OrderState.SHIPPED, limit=10, before=None)
    )
    assert shipped == []


def test_events_come_oldest_first_after_a_sequence_number(store: OrderStore, run: Run[Any]) -> None:
    created(store, run, 4)
    seqs = [e.seq for e in feed(store, run, after=0, limit=10)]
    assert seqs == sorted(seqs)
    assert len(seqs) == 4
    assert [e.seq for e in feed(store, run, after=seqs[1], limit=1)] == [seqs[2]]


def test_the_relay_publishes_in_chunks_each_event_once_in_outbox_order(
    store: OrderStore, run: Run[Any]
) -> None:
    orders = created(store, run, 5)
    published: list[OutboxEvent] = []
    while chunk := run(store.unpublished_events(2)):
        assert len(chunk) <= 2
        run(store.mark_published([e.seq for e in chunk], datetime(2026, 1, 1, tzinfo=UTC)))
        published += chunk
    assert [e.order_id for e in published] == [o.order_id for o in orders]
    in_feed = run(store.events(after=0, limit=10))
    assert [e.event_id for e in in_feed] == [e.event_id for e in published]


def created(store: Any, run: Any, count: int) -> list[Order]:
    """`count` new orders, each created as `POST /orders` would (no idempotency key), in turn."""
    orders = [new_order() for _ in range(count)]
    for order in orders:
        run(store.create(creation(order, key=None)))
    return orders


def feed(store: Any, run: Any, *, after: int, limit: int) -> list[OutboxEvent]:
    """What a feed reader sees once the outbox relay has published everything committed."""
    pending = run(store.unpublished_events(1000))
    run(store.mark_published([e.seq for e in pending], datetime(2026, 1, 1, tzinfo=UTC)))
    events: list[OutboxEvent] = run(store.events(after=after, limit=limit))
    return events


def _with(
    decide: Callable[[OrderAggregate, Claim], tuple[Change, Any]], claim: Claim
) -> Callable[[OrderAggregate], tuple[Change, Any]]:
    """A claim's decision as `update_many` takes it (the executor starts a claim batch so)."""

    def decided(aggregate: OrderAggregate) -> tuple[Change, Any]:
        return decide(aggregate, claim)

    return decided


def test_a_claim_batch_records_every_intent_and_keeps_a_failing_decision_to_its_claim(
    store: OrderStore, run: Run[Any]
) -> None:
    created(store, run, 3)
    claims = run(store.claim_due(owner="A", now=T0, limit=3, lease_s=30))
    broken = claims[1]

    def start(aggregate: OrderAggregate, claim: Claim) -> tuple[Change, CallPlan | None]:
        if claim is broken:
            raise RuntimeError("a bug in one decision")
        return saga.decide_start(aggregate, claim, Context(at(1), "A"))

    lost = attrs.evolve(claims[0], order_id=uuid.uuid4(), step_id=uuid.uuid4())
    results = run(_group_commit(store, [(c.order_id, _with(start, c)) for c in [*claims, lost]]))

    assert isinstance(results[1], RuntimeError)
    assert isinstance(results[3], NotFound)
    for claim, result in ((claims[0], results[0]), (claims[2], results[2])):
        assert isinstance(result, CallPlan)
        assert result.kind is StepKind.RESERVE
        aggregate = run(store.load(claim.order_id))
        assert aggregate.order.state is OrderState.RESERVING
        [attempt] = aggregate.step(claim.step_id).attempts  # type: ignore[union-attr]
        assert (attempt.attempt, attempt.worker, attempt.finished_at) == (1, "A", None)
    untouched = run(store.load(broken.order_id))
    assert untouched.order.state is OrderState.CREATED
    assert untouched.step(broken.step_id).attempts == ()  # type: ignore[union-attr]


def test_two_claims_of_one_order_in_a_batch_each_see_the_change_before_them(
    store: OrderStore, run: Run[Any]
) -> None:
    order = new_order()
    first = new_step(order, seq=1)
    second = new_step(order, kind=StepKind.RELEASE_RESERVATION, seq=2)
    run(store.create(attrs.evolve(creation(order, key=None), steps=(first, second))))
    claims = run(store.claim_due(owner="A", now=T0, limit=2, lease_s=30))
    assert len(claims) == 2
    assert {c.order_id for c in claims} == {order.order_id}

    def note(aggregate: OrderAggregate, claim: Claim) -> tuple[Change, int]:
        seen = sum(1 for s in aggregate.steps if s.last_error)
        step = aggregate.step(claim.step_id)
        assert step is not None
        return Change(steps=(attrs.evolve(step, last_error=f"saw {seen}"),)), seen

    assert run(_group_commit(store, [(c.order_id, _with(note, c)) for c in claims])) == [0, 1]
    notes = sorted(s.last_error or "" for s in run(store.load(order.order_id)).steps)
    assert notes == ["saw 0", "saw 1"]


def test_a_group_commit_applies_each_order_under_its_own_fence_and_keeps_failures_apart(
    store: OrderStore, run: Run[Any]
) -> None:
    # `stale`'s step is claimed by A, then taken over by B once A's lease ran out: A's result
    # for it is fenced off. The other orders are claimed by A afterwards, under live leases.
    stale = new_order()
    run(store.create(creation(stale, key=None)))
    [stale_a] = run(store.claim_due(owner="A", now=T0, limit=5, lease_s=30))
    run(store.claim_due(owner="B", now=at(31), limit=5, lease_s=30))
    applied, broken, also_applied = new_order(), new_order(), new_order()
    for order in (applied, broken, also_applied):
        run(store.create(creation(order, key=None, due=at(31))))
    claims = {
        c.order_id: c for c in run(store.claim_due(owner="A", now=at(32), limit=5, lease_s=30))
    }
    assert set(claims) == {applied.order_id, broken.order_id, also_applied.order_id}

    def reserved(order: Any, claim: Claim) -> Any:
        def decide(aggregate: OrderAggregate) -> tuple[Change, str]:
            change = reserved_change(order, aggregate.steps[0], claim, worker="A")
            return change, f"decided {order.order_id}"

        return decide

    def bug(aggregate: OrderAggregate) -> tuple[Change, str]:
        raise RuntimeError("a bug in one decision")

    stale_change = reserved_change(
        stale, run(store.load(stale.order_id)).steps[0], stale_a, worker="A"
    )
    unknown = uuid.uuid4()
    results = run(
        _group_commit(
            store,
            [
                (applied.order_id, reserved(applied, claims[applied.order_id])),
                (stale.order_id, lambda _: (stale_change, "stale")),
                (broken.order_id, bug),
                (unknown, unchanged),
                (also_applied.order_id, reserved(also_applied, claims[also_applied.order_id])),
            ]
        )
    )

    assert results[0] == f"decided {applied.order_id}"
    assert results[1] == "stale"  # decide saw the aggregate: it knows its change was rejected
    assert isinstance(results[2], RuntimeError)
    assert isinstance(results[3], NotFound)
    assert results[4] == f"decided {also_applied.order_id}"
    for order in (applied, also_applied):
        aggregate = run(store.load(order.order_id))
        assert aggregate.order.state is OrderState.RESERVED
        assert [s.kind for s in aggregate.steps] == [StepKind.RESERVE, StepKind.CHARGE]
        assert [h.to_state for h in run(store.history(order.order_id))][-1] is OrderState.RESERVED
    stale_now = run(store.load(stale.order_id))
    assert stale_now.order.state is OrderState.CREATED
    assert (stale_now.steps[0].attempt, stale_now.steps[0].lease_owner) == (2, "B")
    assert run(store.audit_entries(stale.order_id))[-1] == stale_change.on_reject
    assert run(store.load(broken.order_id)).order.state is OrderState.CREATED
    assert [e.type for e in feed(store, run, after=0, limit=10)].count("order.reserved") == 2


def test_a_group_commit_applies_changes_of_one_order_in_turn(
    store: OrderStore, run: Run[Any]
) -> None:
    order = new_order()
    run(store.create(creation(order, key=None)))

    def bump(aggregate: OrderAggregate) -> tuple[Change, int]:
        seq = aggregate.order.event_seq
        return Change(order=attrs.evolve(aggregate.order, event_seq=seq + 1)), seq

    first = order.event_seq
    assert run(_group_commit(store, [(order.order_id, bump)] * 3)) == [first, first + 1, first + 2]
    assert run(store.load(order.order_id)).order.event_seq == first + 3


@pytest.mark.postgres
def test_an_order_whose_write_breaks_the_shared_statement_fails_alone(
    pg_store: Any, run: Run[Any]
) -> None:
    good, bad = new_order(), new_order()
    for order in (good, bad):
        run(pg_store.create(creation(order, key=None)))

    def moved(order: Any, **fields: Any) -> Any:
        return lambda aggregate: (Change(order=attrs.evolve(aggregate.order, **fields)), "ok")

    results = run(
        pg_store.update_many(
            [
                (good.order_id, moved(good, state=OrderState.CANCELLED)),
                (bad.order_id, moved(bad, total_minor=-1)),  # violates a CHECK constraint
            ]
        )
    )
    assert results[0] == "ok"
    assert isinstance(results[1], Exception)
    assert run(pg_store.load(good.order_id)).order.state is OrderState.CANCELLED
    assert run(pg_store.load(bad.order_id)).order.total_minor == bad.total_minor


def test_the_store_optimisations_switch_reads_0_or_1_and_defaults_on() -> None:
    from orderflow.config import ConfigError, load_settings

    assert load_settings({}).store_optimisations is True
    assert load_settings({"ORDERFLOW_STORE_OPTIMISATIONS": "0"}).store_optimisations is False
    with pytest.raises(ConfigError, match="ORDERFLOW_STORE_OPTIMISATIONS"):
        load_settings({"ORDERFLOW_STORE_OPTIMISATIONS": "off"})
