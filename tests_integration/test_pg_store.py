"""PostgreSQL-only behaviour: concurrent claimers, fencing, atomicity, deadlines, the claim plan."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections import Counter
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
from builders import T0, at, creation, new_order, reserved_change
from conftest import Run

from orderflow_core import ids
from orderflow_core.errors import ConcurrentUpdate, StoreUnavailable
from orderflow_core.model import (
    Attempt,
    Change,
    Claim,
    Order,
    OrderAggregate,
    OutboxEvent,
    Refund,
)
from orderflow_core.states import AttemptOutcome, RefundStatus, Role
from orderflow_pg import PgOrderStore
from orderflow_pg.embedded import forget_dead_holders
from orderflow_pg.feed import FeedHorizon
from orderflow_pg.queries import query
from orderflow_pg.store import claim_params
from orderflow_pg.writes import apply_documents, change_doc

pytestmark = pytest.mark.postgres


async def _claim_until_empty(store: PgOrderStore, owner: str, now: Any) -> list[Claim]:
    claimed: list[Claim] = []
    while batch := await store.claim_due(owner=owner, now=now, limit=20, lease_s=30):
        claimed.extend(batch)
    return claimed


async def _four_executors(url: str, now: Any) -> list[Claim]:
    async with AsyncExitStack() as stack:
        stores = [
            await stack.enter_async_context(PgOrderStore.open(url, min_size=1, max_size=1))
            for _ in range(4)
        ]
        batches = await asyncio.gather(
            *(_claim_until_empty(s, f"executor-{i}", now) for i, s in enumerate(stores))
        )
    return [claim for batch in batches for claim in batch]


def test_four_executors_claim_each_of_500_steps_exactly_once_per_generation(
    pg_store: PgOrderStore, pg_url: str, run: Run[Any]
) -> None:
    for _ in range(500):
        run(pg_store.create(creation(new_order(), key=None)))
    started = time.monotonic()
    first = run(_four_executors(pg_url, T0))
    elapsed = time.monotonic() - started
    assert Counter(c.step_id for c in first).most_common(1)[0][1] == 1
    assert len(first) == 500
    assert {c.attempt for c in first} == {1}
    assert len({c.owner for c in first}) > 1, "the work was spread across executors"
    second = run(_four_executors(pg_url, at(31)))  # every lease has expired
    assert sorted(c.step_id for c in second) == sorted(c.step_id for c in first)
    assert {c.attempt for c in second} == {2}
    print(f"500 claims by 4 executors in {elapsed:.3f} s ({500 / elapsed:.0f} claims/s)")


def _one_claimed(store: PgOrderStore, run: Run[Any]) -> tuple[Order, Claim, OrderAggregate]:
    """A new order whose first step worker A claimed, and the order as read after the claim."""
    order = new_order()
    run(store.create(creation(order, key=None)))
    [claim] = run(store.claim_due(owner="A", now=T0, limit=1, lease_s=30))
    return order, claim, run(store.load(order.order_id))


def test_the_fenced_step_update_refuses_a_generation_that_no_longer_holds(
    pg_store: PgOrderStore, pg_url: str, run: Run[Any]
) -> None:
    order, claim, before = _one_claimed(pg_store, run)
    step = before.steps[0]
    stale = reserved_change(order, step, attrs.evolve(claim, attempt=claim.attempt - 1), worker="A")

    async def write_without_the_lock() -> None:
        conn = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
        async with conn:
            async with conn.transaction():  # committed: the statement itself wrote nothing
                applied = await apply_documents(conn, [change_doc(stale, before)])
            assert applied == [False]

    run(write_without_the_lock())
    assert run(pg_store.load(order.order_id)) == before
    assert len(run(pg_store.history(order.order_id))) == 1
    assert len(run(pg_store.unpublished_events(limit=10))) == 1


def test_a_change_fenced_off_after_decide_accepted_it_raises_and_records_only_the_rejection(
    pg_store: PgOrderStore, run: Run[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    order, claim, before = _one_claimed(pg_store, run)
    stale = reserved_change(
        order, before.steps[0], attrs.evolve(claim, attempt=claim.attempt - 1), worker="A"
    )
    # As if the read-time check had passed: only the fenced statement stands in the way.
    monkeypatch.setattr(OrderAggregate, "holds", lambda aggregate, guard: True)
    with pytest.raises(ConcurrentUpdate):
        run(pg_store.update(order.order_id, lambda _: (stale, "a value of no commit")))
    assert run(pg_store.load(order.order_id)) == before
    audit = run(pg_store.audit_entries(order.order_id))
    assert stale.on_reject is not None
    assert audit[-1] == stale.on_reject


def test_a_database_error_midway_through_a_transition_leaves_nothing_visible(
    pg_store: PgOrderStore, run: Run[Any]
) -> None:
    order = new_order()
    run(pg_store.create(creation(order, key=None)))
    [claim] = run(pg_store.claim_due(owner="w", now=T0, limit=1, lease_s=30))
    before = run(pg_store.load(order.order_id))
    change = reserved_change(order, before.steps[0], claim, worker="w")
    broken_refund = Refund(  # violates CHECK (amount_minor > 0), written after order and steps
        refund_id=uuid.uuid4(),
        order_id=order.order_id,
        amount_minor=-1,
        reason="x",
        status=RefundStatus.REQUESTED,
        requested_by="op",
        created_at=at(5),
        updated_at=at(5),
        step_id=claim.step_id,
    )
    change = attrs.evolve(change, refunds=(broken_refund,))
    with pytest.raises(psycopg.errors.CheckViolation):
        run(pg_store.update(order.order_id, lambda _: (change, None)))
    assert run(pg_store.load(order.order_id)) == before
    assert len(run(pg_store.history(order.order_id))) == 1
    assert len(run(pg_store.unpublished_events(limit=10))) == 1


def test_a_statement_past_its_deadline_is_a_transient_store_error(
    pg_url: str, run: Run[Any]
) -> None:
    order = new_order()

    async def scenario() -> bool:
        async with PgOrderStore.open(pg_url, statement_timeout_s=0.3) as store:
            await store.create(creation(order, key=None))
            async with await psycopg.AsyncConnection.connect(pg_url) as holder:
                lock = "SELECT 1 FROM orders WHERE order_id = %s FOR UPDATE"
                await holder.execute(lock, (order.order_id,))
                with pytest.raises(StoreUnavailable, match="QueryCanceled"):
                    await store.update(order.order_id, lambda _: (Change(), None))
                await holder.rollback()
            return await store.ping()

    assert run(scenario()) is True, "the pool recovers once the lock is gone"


def test_an_unreachable_database_is_a_transient_store_error(run: Run[Any]) -> None:
    async def scenario() -> None:
        url = "postgresql://postgres@127.0.0.1:1/none?connect_timeout=1"
        async with PgOrderStore.open(url, statement_timeout_s=0.5, connect_timeout_s=0.5):
            pass

    with pytest.raises(StoreUnavailable):
        run(scenario())


FINISHED_STEPS = """
INSERT INTO workflow_steps (step_id, order_id, kind, seq, status, idempotency_key, created_at,
                            attempt, max_attempts)
SELECT lpad(to_hex(g), 32, '0')::uuid, md5(%(orders)s || (g / 4)::text)::uuid, 'reserve',
       g %% 4 + 10, 'succeeded',
       'finished-' || lpad(g::text, 8, '0'), %(at)s, 1, 5
FROM generate_series(1, %(count)s) AS g
"""

# Their orders: copies of one real order under the ids the steps above point at.
FINISHED_ORDERS = """
INSERT INTO orders
SELECT (jsonb_populate_record(NULL::orders, to_jsonb(t)
        || jsonb_build_object('order_id', md5(%(orders)s || g::text)::uuid))).*
FROM (SELECT * FROM orders LIMIT 1) AS t, generate_series(0, %(count)s / 4) AS g
"""


def _claim_plan(url: str, finished: int) -> str:
    """The claim's plan with `finished` finished steps of other orders, four to an order, and
    those orders' rows."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # skip FK checks of bulk rows
        bulk = {"orders": "finished", "at": T0, "count": finished}
        conn.execute(FINISHED_STEPS, bulk)
        conn.execute(FINISHED_ORDERS, bulk)
        conn.execute("ANALYZE workflow_steps")
        conn.execute("ANALYZE orders")
        params = claim_params("w", at(60), 20, lease_s=30)
        with conn.transaction(force_rollback=True):
            plan = conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + query("claim_due"), params)
            return "\n".join(row[0] for row in plan.fetchall())


@pytest.mark.slow
def test_the_claim_stays_two_partial_index_scans_with_a_million_finished_steps(
    pg_store: PgOrderStore, pg_url: str, run: Run[Any]
) -> None:
    for _ in range(50):
        run(pg_store.create(creation(new_order(), key=None)))
    plan = _claim_plan(pg_url, 1_000_000)
    print(plan)
    assert "Index Scan using workflow_steps_due_idx" in plan
    assert "Index Scan using workflow_steps_lease_idx" in plan
    assert "Seq Scan" not in plan
    # Each claimed step is updated through its key, not found again through an index of due
    # steps (which would read every due step: a backlog of thousands at each claim).
    assert "Index Scan using workflow_steps_pkey on workflow_steps s" in plan
    assert re.search(r"rows=20(\.00)? loops=1", plan.splitlines()[0]), "claimed a full batch"


def test_users_are_found_by_token_hash_only(pg_store: PgOrderStore, run: Run[Any]) -> None:
    assert run(pg_store.users.has_users()) is False
    run(pg_store.users.upsert_user("order_customer", Role.CUSTOMER, "hash-1"))
    run(pg_store.users.upsert_user("order_customer", Role.CUSTOMER, "hash-2"))
    principal = run(pg_store.users.principal_for_token_hash("hash-2"))
    assert (principal.user_id, principal.role) == ("order_customer", Role.CUSTOMER)
    assert run(pg_store.users.principal_for_token_hash("hash-1")) is None
    assert run(pg_store.users.has_users()) is True


def test_published_events_leave_the_relay_queue(pg_store: PgOrderStore, run: Run[Any]) -> None:
    for _ in range(3):
        run(pg_store.create(creation(new_order(), key=None)))
    pending = run(pg_store.unpublished_events(10))
    run(pg_store.mark_published([e.seq for e in pending[:2]], T0 + timedelta(seconds=1)))
    assert [e.seq for e in run(pg_store.unpublished_events(10))] == [pending[2].seq]
    feed = run(pg_store.events(after=0, limit=10))
    assert [e.event_id for e in feed] == [e.event_id for e in pending[:2]]
    assert [e.seq for e in feed] == [1, 2]  # numbered in publication order


def test_a_late_commit_with_a_smaller_seq_is_published_before_anything_after_it(
    pg_store: PgOrderStore, run: Run[Any], pg_url: str
) -> None:
    run(pg_store.create(creation(new_order(), key=None)))
    assert [e.seq for e in run(pg_store.unpublished_events(10))] == [1]  # nobody writing
    late = new_order()
    with psycopg.connect(pg_url) as writer:  # a writer as `apply_changes`: xid, then a seq
        writer.execute(TAG_WRITER)
        writer.execute(LATE_EVENT, {"event_id": uuid.uuid4(), "order_id": late.order_id, "at": T0})
        run(pg_store.create(creation(new_order(), key=None)))  # commits a larger seq first
        waiting = run(pg_store.unpublished_events(10))
        assert [e.seq for e in waiting] == [1]  # what came before the writer, not past it
        run(pg_store.mark_published([e.seq for e in waiting], T0))
        assert run(pg_store.unpublished_events(10)) == []  # the writer still runs
        writer.commit()
    published = run(pg_store.unpublished_events(10))
    assert [e.seq for e in published] == [2, 3]
    assert published[0].order_id == late.order_id
    run(pg_store.mark_published([e.seq for e in published], T0))
    assert [e.seq for e in run(pg_store.events(after=1, limit=10))] == [2, 3]
    assert run(pg_store.unpublished_events(10)) == []


TAG_WRITER = "SELECT pg_current_xact_id(), pg_advisory_xact_lock_shared(784215312)"
LATE_EVENT = """
INSERT INTO outbox (event_id, order_id, order_seq, type, payload, created_at)
VALUES (%(event_id)s, %(order_id)s, 1, 'order.poked', '{}', %(at)s)
"""


def test_a_transaction_that_only_locks_rows_does_not_hold_the_feed_back(
    pg_store: PgOrderStore, run: Run[Any], pg_url: str
) -> None:
    order = new_order()
    run(pg_store.create(creation(order, key=None)))
    with psycopg.connect(pg_url) as reader:  # e.g. a worker frozen after its locking read
        reader.execute("SELECT 1 FROM orders WHERE order_id = %s FOR UPDATE", (order.order_id,))
        reader.execute("SELECT pg_current_xact_id()")
        run(pg_store.create(creation(new_order(), key=None)))
        assert [e.seq for e in run(pg_store.unpublished_events(10))] == [1, 2]


def test_the_feed_horizon_waits_for_the_writers_seen_with_a_seq() -> None:
    horizon = FeedHorizon()
    assert horizon.observe(None, []) is None  # no event yet
    assert horizon.observe(5, ["100"]) is None  # 100 may still commit a seq below 5
    assert horizon.observe(9, ["100", "101"]) is None
    assert horizon.observe(12, ["101", "102"]) == 5  # 100 ended: 5 is safe, 9 waits for 101
    assert horizon.observe(12, ["102"]) == 9
    assert horizon.observe(15, []) == 15  # nobody writing: everything seen is safe
    assert horizon.observe(15, ["103"]) == 15  # never goes back


def test_a_second_step_with_the_same_order_and_seq_is_refused(
    pg_store: PgOrderStore, run: Run[Any], pg_url: str
) -> None:
    order = new_order()
    run(pg_store.create(creation(order, key=None)))
    with psycopg.connect(pg_url) as conn:
        step = conn.execute(
            "SELECT seq FROM workflow_steps WHERE order_id = %s ORDER BY seq LIMIT 1",
            (order.order_id,),
        ).fetchone()
        assert step is not None
        with pytest.raises(psycopg.errors.UniqueViolation):  # in place of the key's own index
            conn.execute(
                "INSERT INTO workflow_steps (step_id, order_id, kind, seq, status,"
                " idempotency_key, created_at, max_attempts)"
                " VALUES (%s, %s, 'reserve', %s, 'pending', 'another-key', %s, 5)",
                (uuid.uuid4(), order.order_id, step[0], T0),
            )


def test_a_migrated_database_is_ready(pg_store: PgOrderStore, run: Run[Any]) -> None:
    assert run(pg_store.ping()) is True
    assert run(pg_store.migrations_current()) is True


def test_dead_holders_of_an_embedded_server_are_forgotten(tmp_path: Path) -> None:
    dead = 2**22 + 12345  # above the default pid_max, so no such process
    (tmp_path / ".handle_pids.json").write_text(f"[1, {dead}]")
    assert forget_dead_holders(tmp_path) == [dead]
    assert (tmp_path / ".handle_pids.json").read_text() == "[1]"


# The history is read back from the state-change events (the view `order_history`), so the store
# refuses, before sending anything, a change whose history its events would not show.
def _broken_creations() -> dict[str, Change]:
    order = new_order()
    good = creation(order, key=None)
    [entry], [event] = good.history, good.events
    return {
        "a history entry without its event": attrs.evolve(good, events=()),
        "an event numbered other than its order says": attrs.evolve(
            good, order=attrs.evolve(order, event_seq=2)
        ),
        "an event of another order": attrs.evolve(
            good, events=(attrs.evolve(event, order_id=uuid.uuid4()),)
        ),
        "an entry saying another reason": attrs.evolve(
            good, history=(attrs.evolve(entry, reason="something else"),)
        ),
        "an entry of another instant": attrs.evolve(good, history=(attrs.evolve(entry, at=at(1)),)),
        "events without the order that numbers them": Change(events=good.events),
    }


@pytest.mark.parametrize("case", list(_broken_creations()))
def test_a_change_whose_history_its_events_would_not_show_is_refused(case: str) -> None:
    with pytest.raises(ValueError):
        change_doc(_broken_creations()[case], new=True)


def test_the_history_is_read_back_from_the_state_events_with_the_other_events_left_out(
    pg_store: PgOrderStore, run: Run[Any]
) -> None:
    order = new_order()
    created = creation(order, key=None)
    run(pg_store.create(created))
    poked = attrs.evolve(order, event_seq=order.event_seq + 1, updated_at=at(1))
    poke = OutboxEvent(
        ids.event_id(order.order_id, poked.event_seq), order.order_id, "order.poked", {}, at(1)
    )
    run(pg_store.update(order.order_id, lambda _: (Change(order=poked, events=(poke,)), None)))
    assert run(pg_store.history(order.order_id)) == list(created.history)
    view = run(pg_store.load_with_history(order.order_id))
    assert view is not None
    assert view[1] == list(created.history)
    types = [e.type for e in run(pg_store.unpublished_events(10))]
    assert types == ["order.created", "order.poked"]


def test_the_latest_attempt_rides_on_its_step_row_and_moves_out_when_the_next_one_starts(
    pg_store: PgOrderStore, pg_url: str, run: Run[Any]
) -> None:
    order, claim, claimed = _one_claimed(pg_store, run)
    step = claimed.steps[0]
    under_way = Attempt(claim.attempt, at(1), "A")
    opened = attrs.evolve(step, attempts=(under_way,))
    run(pg_store.update(order.order_id, lambda _: (Change(steps=(opened,)), None)))
    on_row = (
        "SELECT latest_attempt, latest_started_at, latest_worker, latest_finished_at,"
        " latest_outcome, latest_error FROM workflow_steps"
    )
    earlier = (
        "SELECT attempt, started_at, worker, finished_at, outcome, error FROM finished_attempts"
    )
    with psycopg.connect(pg_url) as conn:
        assert conn.execute(on_row).fetchall() == [(claim.attempt, at(1), "A", None, None, None)]
        assert conn.execute(earlier).fetchall() == []
    before = run(pg_store.load(order.order_id))
    assert before.steps[0].attempts == (under_way,)

    # It ends: still on the row, now with its outcome; nothing inserted
    done = attrs.evolve(under_way, finished_at=at(2), outcome=AttemptOutcome.TRANSIENT, error="503")
    closed = attrs.evolve(opened, attempts=(done,))
    doc = change_doc(Change(steps=(closed,)), before)
    assert (doc["new_attempts"], doc["attempts"]) == ([], [])
    run(pg_store.update(order.order_id, lambda _: (Change(steps=(closed,)), None)))
    with psycopg.connect(pg_url) as conn:
        assert conn.execute(on_row).fetchall() == [
            (claim.attempt, at(1), "A", at(2), "transient", "503")
        ]
        assert conn.execute(earlier).fetchall() == []
    before = run(pg_store.load(order.order_id))
    assert before.steps[0].attempts == (done,)

    # The next one starts: the ended one is inserted once, the row holds the new one
    second = Attempt(claim.attempt + 1, at(3), "B")
    retried = attrs.evolve(closed, attempt=claim.attempt + 1, attempts=(done, second))
    doc = change_doc(Change(steps=(retried,)), before)
    assert (len(doc["new_attempts"]), doc["attempts"]) == (1, [])
    run(pg_store.update(order.order_id, lambda _: (Change(steps=(retried,)), None)))
    with psycopg.connect(pg_url) as conn:
        assert conn.execute(on_row).fetchall() == [
            (claim.attempt + 1, at(3), "B", None, None, None)
        ]
        assert conn.execute(earlier).fetchall() == [
            (claim.attempt, at(1), "A", at(2), "transient", "503")
        ]
        shown = conn.execute("SELECT attempt, outcome FROM step_attempts ORDER BY 1").fetchall()
    assert shown == [(claim.attempt, "transient"), (claim.attempt + 1, None)]
    before = run(pg_store.load(order.order_id))
    assert before.steps[0].attempts == (done, second)

    # An earlier attempt that changes afterwards (a status check proving it charged nothing)
    # is updated in place
    proved = attrs.evolve(done, outcome=AttemptOutcome.NOT_CHARGED)
    amended = attrs.evolve(retried, attempts=(proved, second))
    doc = change_doc(Change(steps=(amended,)), before)
    assert (doc["new_attempts"], len(doc["attempts"])) == ([], 1)
    run(pg_store.update(order.order_id, lambda _: (Change(steps=(amended,)), None)))
    assert run(pg_store.load(order.order_id)).steps[0].attempts == (proved, second)


def test_a_step_with_two_attempts_under_way_is_refused() -> None:
    order = new_order()
    step = creation(order, key=None).steps[0]
    twice = attrs.evolve(step, attempts=(Attempt(1, at(1), "A"), Attempt(2, at(2), "B")))
    with pytest.raises(ValueError, match="2 attempts under way"):
        change_doc(Change(steps=(twice,)))


def test_a_derived_step_key_is_not_stored_and_reads_back_and_any_other_key_is_kept(
    pg_store: PgOrderStore, pg_url: str, run: Run[Any]
) -> None:
    order = new_order()
    run(pg_store.create(creation(order, key=None)))
    [step] = run(pg_store.load(order.order_id)).steps
    assert step.idempotency_key == f"{order.order_id}:{step.kind.value}:{step.seq}"
    stored = "SELECT idempotency_key FROM workflow_steps WHERE step_id = %s"
    with psycopg.connect(pg_url) as conn:
        assert conn.execute(stored, (step.step_id,)).fetchone() == (None,)
    # A key that is not the derived one (a row written before, or a store user's own) is kept
    other = creation(new_order(), key=None)
    [first] = other.steps
    custom = attrs.evolve(first, idempotency_key="kept-as-it-was")
    run(pg_store.create(attrs.evolve(other, steps=(custom,))))
    with psycopg.connect(pg_url) as conn:
        assert conn.execute(stored, (custom.step_id,)).fetchone() == ("kept-as-it-was",)
    assert run(pg_store.load(custom.order_id)).steps[0].idempotency_key == "kept-as-it-was"


def test_an_event_is_stored_without_its_order_id_and_read_as_it_was_emitted(
    pg_store: PgOrderStore, pg_url: str, run: Run[Any]
) -> None:
    order = new_order()
    created = creation(order, key=None)
    run(pg_store.create(created))
    [emitted] = created.events
    assert emitted.payload["order_id"] == str(order.order_id)
    with psycopg.connect(pg_url) as conn:
        # a row written before kept the id in its payload: it reads the same
        conn.execute(TAG_WRITER)
        conn.execute(
            "INSERT INTO outbox (event_id, order_id, order_seq, type, payload, created_at)"
            " VALUES (%s, %s, 2, 'order.poked', %s, %s)",
            (
                uuid.uuid4(),
                order.order_id,
                psycopg.types.json.Jsonb({"order_id": str(order.order_id), "n": 1}),
                T0,
            ),
        )
        conn.commit()
        stored = conn.execute("SELECT payload FROM outbox ORDER BY seq").fetchall()
    assert "order_id" not in stored[0][0]
    assert stored[0][0] == {k: v for k, v in emitted.payload.items() if k != "order_id"}
    # an event whose payload never named its order gains nothing
    bare = attrs.evolve(order, event_seq=3)
    plain = OutboxEvent(ids.event_id(order.order_id, 3), order.order_id, "order.plain", {}, at(1))
    run(pg_store.update(order.order_id, lambda _: (Change(order=bare, events=(plain,)), None)))
    waiting = run(pg_store.unpublished_events(10))
    assert [e.payload for e in waiting] == [
        emitted.payload,
        {"order_id": str(order.order_id), "n": 1},
        {},
    ]
    run(pg_store.mark_published([e.seq for e in waiting], T0))
    assert [e.payload for e in run(pg_store.events(after=0, limit=10))] == [
        e.payload for e in waiting
    ]


def test_a_migration_under_a_running_store_costs_one_failed_read_not_every_later_one(
    pg_url: str, run: Run[Any]
) -> None:
    """Another process changes the columns a prepared statement returns (as `orderflow
    migrate` of a newer release does while older processes run): the server refuses that
    statement on this connection from then on; the store drops the connection, reports the
    read unavailable once, and the next read prepares afresh on a new connection."""
    order = new_order()

    async def scenario() -> tuple[int, StoreUnavailable | None, list[Order]]:
        async with PgOrderStore.open(pg_url, min_size=1, max_size=1) as store:
            await store.create(creation(order, key=None))
            for _ in range(8):  # past psycopg's prepare threshold: a server-side statement
                await store.list_orders(customer_id=None, state=None, limit=10, before=None)
            async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as other:
                await other.execute("ALTER TABLE orders ADD COLUMN added_by_a_migration integer")
            refused: StoreUnavailable | None = None
            try:
                await store.list_orders(customer_id=None, state=None, limit=10, before=None)
            except StoreUnavailable as exc:
                refused = exc
            pages = [
                await store.list_orders(customer_id=None, state=None, limit=10, before=None)
                for _ in range(3)
            ]
            return len(pages), refused, [o for page in pages for o in page]

    pages, refused, found = run(scenario())
    assert refused is not None
    assert "schema changed" in str(refused)
    assert pages == 3
    assert [o.order_id for o in found] == [order.order_id] * 3
