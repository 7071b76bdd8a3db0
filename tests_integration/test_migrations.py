"""The migrations give the schema the store's queries need, once, under concurrency, unchanged."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
from builders import T0, at
from psycopg.rows import dict_row

from orderflow.config import DAY_S
from orderflow_core import ids
from orderflow_core.model import (
    ApiIdempotency,
    Attempt,
    AuditEntry,
    HistoryEntry,
    Order,
    OutboxEvent,
    Refund,
    Step,
)
from orderflow_core.testing.clock import FakeClock
from orderflow_pg import (
    MigrationChecksumMismatch,
    PgOrderStore,
    migrate,
    migration_files,
    run_migrate,
)
from orderflow_pg.prune import Policy, Pruner
from orderflow_pg.queries import CITUS_ONLY, include_fragments, queries

pytestmark = pytest.mark.postgres
REPO = Path(__file__).resolve().parent.parent


def _names(cls: type[Any], *extra: str) -> set[str]:
    return {f.name for f in attrs.fields(cls)} | set(extra)


# Every model field is a column of the same name (rows.py relies on that), plus bookkeeping.
EXPECTED_COLUMNS = {
    "orders": _names(Order, "version"),  # the store's own fence (0006), not a model field
    "workflow_steps": (_names(Step) - {"attempts"})
    | {f"latest_{name}" for name in _names(Attempt) - {"attempt"}}  # its latest (0021, 0025)
    | {"latest_attempt"},
    "finished_attempts": _names(Attempt, "step_id", "order_id"),  # keyed by order (0027)
    "step_attempts": _names(Attempt, "step_id"),  # a view: the ended ones and those under way
    "refunds": _names(Refund),
    "order_history": _names(HistoryEntry),  # a view over the outbox's transitions (0019)
    "audit_log": _names(AuditEntry, "id"),
    # number within the order, state change, payload stored without its order's id (0023)
    "outbox": _names(OutboxEvent, "order_seq", "transition", "order_id_left_out"),
    "outbox_feed": {"one", "published_through", "pruned_through"},  # 0015, floor 0040
    "processed_events": {"event_id", "order_id"},
    "api_idempotency": _names(ApiIdempotency, "placement"),  # where it is kept (0027)
    "users": {
        "user_id",
        "role",
        "token_hash",
        "created_at",
        "token_set_at",
        "disabled_at",
        "last_used_at",
    },
    "schema_migrations": {"version", "name", "checksum", "applied_at"},
}


def _columns(url: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    with psycopg.connect(url) as conn:
        rows = conn.execute(  # a partition's columns are its table's (audit_log, 0041)
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = 'public' AND NOT EXISTS ("
            "   SELECT FROM pg_inherits WHERE inhrelid = format('%I', table_name)::regclass)"
        ).fetchall()
    for table, column in rows:
        found.setdefault(table, set()).add(column)
    return found


def test_fresh_migrations_give_every_table_and_column_the_store_maps(
    fresh_database_url: str,
) -> None:
    assert asyncio.run(migrate(fresh_database_url)) == [f.name for f in migration_files()]
    assert _columns(fresh_database_url) == EXPECTED_COLUMNS


def _as_prepared(sql_text: str) -> str:
    numbers: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${numbers.setdefault(match[1], len(numbers) + 1)}"

    return re.sub(r"%\((\w+)\)s", number, sql_text)


def test_every_query_of_the_store_prepares_against_the_migrated_schema(pg_url: str) -> None:
    preparable = re.compile(r"^\s*(?:--[^\n]*\n\s*)*(SELECT|INSERT|UPDATE|DELETE|WITH)\b", re.I)
    checked: set[str] = set()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for name, text in queries().items():
            if name in CITUS_ONLY:
                continue  # prepared on a cluster: tests_integration/test_citus.py
            if preparable.match(text):
                conn.execute(f"PREPARE check_{name} AS {_as_prepared(text)}")
                checked.add(name)
    skipped = set(queries()) - checked
    assert skipped == {"create_schema_migrations"} | CITUS_ONLY, "only the DDL is skipped"


AGGREGATE_READS = (
    "lock_aggregate", "lock_aggregates", "get_aggregate", "get_order_view", "claim_due",
    "claim_order",
)


def test_the_aggregate_read_is_written_once_and_included_by_every_statement_returning_one() -> None:
    text = (Path(__file__).parents[1] / "orderflow_pg" / "queries.sql").read_text("utf-8")
    assert text.count("'attempt_rows'") == 1, "one aggregate read in queries.sql"
    assert "aggregate_of" not in queries(), "a fragment is no statement"
    for name in AGGREGATE_READS:
        statement = queries()[name]
        assert "/*@aggregate_of" not in statement
        assert statement.count("'attempt_rows'") == 1
        for column in ("order_row", "step_rows", "refund_rows"):
            assert f"AS {column}" in statement
    # Each includes it with its own order id and rows: a locking read reads what it locked.
    assert "FROM s AS agg_s WHERE agg_s.order_id = o.order_id" in queries()["lock_aggregates"]
    assert "FROM o AS agg_o" in queries()["lock_aggregate"]
    assert "agg_o.order_id = c.order_id" in queries()["claim_due"]


def test_a_fragment_included_without_one_of_its_slots_is_refused() -> None:
    fragments = {"frag": "-- a fragment\nSELECT {a}, {b}"}
    assert include_fragments("/*@frag(a=1, b=%(x)s)*/", fragments) == "\nSELECT 1, %(x)s"
    with pytest.raises(ValueError, match=r"leaves \{b\} of frag open"):
        include_fragments("/*@frag(a=1)*/", fragments)
    assert include_fragments("/*@order o*/", fragments) == "/*@order o*/"


def test_running_the_migrations_twice_applies_nothing_the_second_time(
    fresh_database_url: str,
) -> None:
    assert asyncio.run(migrate(fresh_database_url))
    assert asyncio.run(migrate(fresh_database_url)) == []


def test_two_runner_processes_at_once_both_succeed_and_apply_each_file_once(
    fresh_database_url: str,
) -> None:
    code = "import sys; from orderflow_pg import run_migrate; sys.exit(run_migrate(sys.argv[1]))"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runners = [
        subprocess.Popen(
            [sys.executable, "-c", code, fresh_database_url],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [runner.communicate(timeout=60) for runner in runners]
    assert [runner.returncode for runner in runners] == [0, 0], outputs
    said = sorted(out.strip() for out, _ in outputs)
    names = [f.name for f in migration_files()]
    assert said == ["\n".join(f"applied {n}" for n in names), "schema is up to date"]
    with psycopg.connect(fresh_database_url) as conn:
        rows = conn.execute("SELECT name FROM schema_migrations ORDER BY name").fetchall()
    assert rows == [(n,) for n in names]


def test_a_changed_applied_migration_is_refused_with_a_clear_error(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE schema_migrations SET checksum = 'edited-after-apply'")
    with pytest.raises(MigrationChecksumMismatch, match=r"0001_initial\.sql was changed") as info:
        asyncio.run(migrate(pg_url))
    assert info.value.code == "migration_checksum_mismatch"
    assert run_migrate(pg_url) == 1
    assert "migration_checksum_mismatch" in capsys.readouterr().err


# What a database migrated through 0018 holds for one order that reached `reserved`: its history
# rows and its events, written by the release before 0019 (the event ids random, as uuid5 ids
# of that time look to the migration).
OLD_ORDER = (
    """
INSERT INTO orders (order_id, customer_id, items, total_minor, currency, process_version, state,
                    created_at, updated_at, event_seq)
VALUES (%(order)s, 'alice', '[]', 100, 'RUB', 1, 'reserved', %(t0)s, %(t1)s, 3)
""",
    """
INSERT INTO order_history (order_id, seq, from_state, to_state, at, actor, reason) VALUES
    (%(order)s, 1, NULL, 'created', %(t0)s, 'customer:alice', 'order placed'),
    (%(order)s, 3, 'created', 'reserved', %(t1)s, 'w1', 'stock reserved')
""",
    """
INSERT INTO outbox (event_id, order_id, type, payload, created_at) VALUES
    (gen_random_uuid(), %(order)s, 'order.created', jsonb_build_object('from', NULL, 'to',
     'created', 'reason', 'order placed', 'actor', 'customer:alice'), %(t0)s),
    (gen_random_uuid(), %(order)s, 'order.needs_attention', '{"reason": "x"}', %(t0)s),
    (gen_random_uuid(), %(order)s, 'order.reserved', jsonb_build_object('from', 'created', 'to',
     'reserved', 'reason', %(reason)s::text, 'actor', 'w1'), %(t1)s)
""",
)


def _through_0018(url: str, reason: str) -> tuple[uuid.UUID, dict[str, Any]]:
    order = uuid.uuid4()
    params = {"order": order, "t0": T0, "t1": at(5), "reason": reason}
    _old_database(url, 19, OLD_ORDER, params)
    return order, params


def _old_database(
    url: str, version: int, statements: tuple[str, ...], params: dict[str, Any]
) -> None:
    """A database of the release before `version`: its migrations, then `statements`."""
    _migrate_before(url, version)
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement, params)


def _migrate_before(url: str, version: int) -> None:
    """Apply every migration older than `version`, as a database of that release has them."""
    with psycopg.connect(url, autocommit=True) as conn:
        for file in migration_files():
            if file.version < version:
                conn.execute(file.sql.encode("utf-8"))


def _migration(version: int) -> bytes:
    [file] = [f for f in migration_files() if f.version == version]
    return file.sql.encode("utf-8")


def _across(conn: psycopg.Connection[Any], version: int, query: str) -> tuple[list[Any], list[Any]]:
    """What `query` returns before migration `version` runs on `conn`, and after."""
    before = conn.execute(query).fetchall()
    conn.execute(_migration(version))
    return before, conn.execute(query).fetchall()


def test_0019_numbers_the_events_and_keeps_the_history_as_a_view(
    fresh_database_url: str,
) -> None:
    order, _ = _through_0018(fresh_database_url, "stock reserved")
    with psycopg.connect(fresh_database_url, autocommit=True) as conn:
        conn.execute(_migration(19))
        numbered = conn.execute(
            "SELECT order_seq, type, transition FROM outbox ORDER BY seq"
        ).fetchall()
        history = conn.execute(
            "SELECT seq, from_state, to_state, at, actor, reason FROM order_history"
            " WHERE order_id = %s ORDER BY seq",
            (order,),
        ).fetchall()
    assert numbered == [
        (1, "order.created", True),
        (2, "order.needs_attention", False),
        (3, "order.reserved", True),
    ]
    assert history == [
        (1, None, "created", T0, "customer:alice", "order placed"),
        (3, "created", "reserved", at(5), "w1", "stock reserved"),
    ]


def test_0019_refuses_a_history_its_events_do_not_show_and_changes_nothing(
    fresh_database_url: str,
) -> None:
    _through_0018(fresh_database_url, "a different reason")
    with psycopg.connect(fresh_database_url, autocommit=True) as conn:
        refused = pytest.raises(psycopg.errors.RaiseException, match="1 history row")
        with refused, conn.transaction():
            conn.execute(_migration(19))
        assert conn.execute("SELECT count(*) FROM order_history").fetchone() == (2,)
        kept = conn.execute(
            "SELECT count(*) FROM information_schema.columns"
            " WHERE table_name = 'outbox' AND column_name = 'order_seq'"
        ).fetchone()
    assert kept == (0,)


# What a database migrated through 0020 holds for one step: an ended attempt and the next one
# under way (0021 moves it onto the step's row), or, for the refusal, two attempts under way.
OLD_ATTEMPTS = (
    """
INSERT INTO orders (order_id, customer_id, items, total_minor, currency, process_version, state,
                    created_at, updated_at)
VALUES (%(order)s, 'alice', '[]', 100, 'RUB', 1, 'reserved', %(t0)s, %(t1)s)
""",
    """
INSERT INTO workflow_steps (step_id, order_id, kind, seq, status, idempotency_key, created_at,
                            attempt, max_attempts, lease_owner, lease_expires_at)
VALUES (%(step)s, %(order)s, 'charge', 1, 'running', 'k', %(t0)s, 2, 5, 'w2', %(t1)s)
""",
    """
INSERT INTO step_attempts (step_id, attempt, started_at, worker, finished_at, outcome, error)
VALUES (%(step)s, 1, %(t0)s, 'w1', %(t1)s, %(first)s, NULL),
       (%(step)s, 2, %(t1)s, 'w2', NULL, NULL, NULL)
""",
)


def _through_0020(url: str, first_outcome: str | None) -> dict[str, Any]:
    params = {
        "step": uuid.uuid4(),
        "order": uuid.uuid4(),
        "t0": T0,
        "t1": at(5),
        "first": first_outcome,
    }
    _old_database(url, 21, OLD_ATTEMPTS, params)
    return params


def test_0021_moves_the_attempt_under_way_onto_its_step_and_shows_every_attempt_as_before(
    fresh_database_url: str,
) -> None:
    params = _through_0020(fresh_database_url, "transient")
    show = "SELECT * FROM step_attempts ORDER BY step_id, attempt"
    with psycopg.connect(fresh_database_url, autocommit=True) as conn:
        before, after = _across(conn, 21, show)
        finished = conn.execute("SELECT step_id, attempt FROM finished_attempts").fetchall()
        on_step = conn.execute(
            "SELECT open_attempt, open_started_at, open_worker FROM workflow_steps"
        ).fetchall()
    assert after == before
    assert finished == [(params["step"], 1)]
    assert on_step == [(2, at(5), "w2")]


def test_0021_refuses_a_step_with_two_attempts_under_way_and_changes_nothing(
    fresh_database_url: str,
) -> None:
    _through_0020(fresh_database_url, None)
    with psycopg.connect(fresh_database_url, autocommit=True) as conn:
        refused = pytest.raises(psycopg.errors.RaiseException, match="1 step")
        with refused, conn.transaction():
            conn.execute(_migration(21))
        kept = conn.execute("SELECT count(*) FROM step_attempts WHERE outcome IS NULL").fetchone()
        table = conn.execute(
            "SELECT table_type FROM information_schema.tables WHERE table_name = 'step_attempts'"
        ).fetchone()
    assert kept == (2,)
    assert table == ("BASE TABLE",)


# What a database migrated through 0023 holds: an order with every column set (waiting for a
# person, reserved, paid, traced) and one with only what creation writes, a step and a refund
# of the first, in the column order of that release.
OLD_ORDERS = (
    """
INSERT INTO orders (order_id, customer_id, items, total_minor, currency, process_version, state,
                    created_at, updated_at, event_seq, state_reason, reservation_id,
                    reservation_status, reserved_at, reservation_expires_at, reservation_expired,
                    payment_status, payment_reference, version, attention_reason,
                    attention_since, trace_parent)
VALUES (%(full)s, 'alice', '[{"sku": "A", "quantity": 2}]', 300, 'RUB', 1, 'payment_unknown',
        %(t0)s, %(t1)s, 7, 'timeout', 'res-1', 'held', %(t0)s, %(t1)s, true, 'unknown',
        'pay-1', 9, 'expired_while_unknown', %(t1)s, '00-0af7651916cd43dd8448eb211c80319c-01'),
       (%(bare)s, 'bob', '[]', 0, 'RUB', 1, 'created', %(t0)s, %(t0)s, 1, NULL, NULL, 'none',
        NULL, NULL, false, 'none', NULL, 0, NULL, NULL, NULL)
""",
    """
INSERT INTO workflow_steps (step_id, order_id, kind, seq, status, created_at, max_attempts)
VALUES (%(step)s, %(full)s, 'charge', 2, 'succeeded', %(t0)s, 5)
""",
    """
INSERT INTO refunds (refund_id, order_id, amount_minor, reason, status, requested_by,
                     created_at, updated_at, step_id)
VALUES (%(refund)s, %(full)s, 100, 'damaged', 'requested', 'operator', %(t1)s, %(t1)s, %(step)s)
""",
)


def test_0024_rebuilds_orders_with_the_changing_columns_last_and_keeps_every_row(
    fresh_database_url: str,
) -> None:
    ids = {name: uuid.uuid4() for name in ("full", "bare", "step", "refund")}
    _old_database(fresh_database_url, 24, OLD_ORDERS, {**ids, "t0": T0, "t1": at(5)})
    show = "SELECT * FROM orders ORDER BY order_id"
    positions = (
        "SELECT attname FROM pg_attribute WHERE attrelid = 'orders'::regclass"
        " AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
    )
    with psycopg.connect(fresh_database_url, autocommit=True, row_factory=dict_row) as conn:
        before, after = _across(conn, 24, show)
        columns = [row["attname"] for row in conn.execute(positions).fetchall()]
        options = conn.execute(
            "SELECT reloptions FROM pg_class WHERE relname = 'orders'"
        ).fetchone()
        step_keys = conn.execute(
            "SELECT conname FROM pg_constraint"
            " WHERE conrelid = 'workflow_steps'::regclass AND contype = 'f'"
        ).fetchall()
        with pytest.raises(psycopg.errors.ForeignKeyViolation), conn.transaction():
            conn.execute(
                "INSERT INTO refunds (refund_id, order_id, amount_minor, reason, status,"
                " requested_by, created_at, updated_at, step_id)"
                " VALUES (gen_random_uuid(), gen_random_uuid(), 1, 'x', 'requested', 'op',"
                " now(), now(), gen_random_uuid())"
            )
    assert after == before  # every value of every row, compared by column name
    assert len(after) == 2
    assert columns[0] == "order_id"
    assert columns[-5:] == ["version", "updated_at", "event_seq", "state", "state_reason"]
    assert options == {"reloptions": ["fillfactor=80"]}
    assert step_keys == []  # the steps' key to their order is not put back; refunds keep theirs


OLD_STEP_ATTEMPTS = (
    """
INSERT INTO workflow_steps (step_id, order_id, kind, seq, status, created_at, attempt,
                            max_attempts, lease_owner, lease_expires_at, open_attempt,
                            open_started_at, open_worker)
VALUES (%(retried)s, %(order)s, 'charge', 1, 'succeeded', %(t0)s, 2, 5, NULL, NULL,
        NULL, NULL, NULL),
       (%(running)s, %(order)s, 'ship', 2, 'running', %(t0)s, 2, 5, 'w3', %(t1)s,
        2, %(t1)s, 'w3'),
       (%(waiting)s, %(order)s, 'expire_reservation', 3, 'pending', %(t0)s, 0, 1, NULL, NULL,
        NULL, NULL, NULL)
""",
    """
INSERT INTO finished_attempts (step_id, attempt, started_at, worker, finished_at, outcome, error)
VALUES (%(retried)s, 1, %(t0)s, 'w1', %(t0)s, 'transient', '503'),
       (%(retried)s, 2, %(t0)s, 'w2', %(t1)s, 'succeeded', NULL),
       (%(running)s, 1, %(t0)s, 'w1', %(t1)s, 'unknown', 'lease lost')
""",
)


def test_0025_puts_each_steps_latest_attempt_on_its_row_and_shows_every_attempt_as_before(
    fresh_database_url: str,
) -> None:
    ids = {name: uuid.uuid4() for name in ("order", "retried", "running", "waiting")}
    _old_database(fresh_database_url, 25, OLD_STEP_ATTEMPTS, {**ids, "t0": T0, "t1": at(5)})
    show = "SELECT * FROM step_attempts ORDER BY step_id, attempt"
    on_rows = (
        "SELECT step_id, latest_attempt, latest_worker, latest_finished_at, latest_outcome,"
        " latest_error FROM workflow_steps ORDER BY seq"
    )
    with psycopg.connect(fresh_database_url, autocommit=True) as conn:
        before, after = _across(conn, 25, show)
        earlier = conn.execute(
            "SELECT step_id, attempt FROM finished_attempts ORDER BY step_id, attempt"
        ).fetchall()
        rows = conn.execute(on_rows).fetchall()
        with pytest.raises(psycopg.errors.CheckViolation), conn.transaction():
            conn.execute(
                "UPDATE workflow_steps SET latest_outcome = 'succeeded' WHERE step_id = %s",
                (ids["waiting"],),
            )
    assert after == before
    assert len(after) == 4
    assert sorted(earlier) == sorted([(ids["retried"], 1), (ids["running"], 1)])
    assert rows == [
        (ids["retried"], 2, "w2", at(5), "succeeded", None),  # moved onto its row
        (ids["running"], 2, "w3", None, None, None),  # under way: already there
        (ids["waiting"], None, None, None, None, None),  # never started
    ]


def test_0026_leaves_half_of_each_new_step_and_order_page_free(fresh_database_url: str) -> None:
    _migrate_before(fresh_database_url, 26)
    options = (
        "SELECT relname, reloptions FROM pg_class"
        " WHERE relname IN ('orders', 'workflow_steps') ORDER BY relname"
    )
    with psycopg.connect(fresh_database_url, autocommit=True) as conn:
        before, after = _across(conn, 26, options)
    assert before == [("orders", ["fillfactor=80"]), ("workflow_steps", ["fillfactor=80"])]
    assert after == [("orders", ["fillfactor=50"]), ("workflow_steps", ["fillfactor=50"])]


OLD_UNKEYED = (
    """
INSERT INTO workflow_steps (step_id, order_id, kind, seq, status, created_at, attempt,
                            max_attempts)
VALUES (%(step)s, %(order)s, 'charge', 1, 'succeeded', %(t0)s, 2, 5)
""",
    """
INSERT INTO finished_attempts (step_id, attempt, started_at, worker, finished_at, outcome)
VALUES (%(step)s, 1, %(t0)s, 'w1', %(t0)s, 'transient')
""",
    """
INSERT INTO api_idempotency (user_id, scope, key, fingerprint, resource_id, created_at)
VALUES ('alice', 'create_order', 'k-1', 'f', %(order)s, %(t0)s),
       ('bob', 'refund:' || %(order)s::text, 'k-2', 'f', %(refund)s, %(t0)s)
""",
)


def test_0027_keys_every_order_scoped_table_by_its_order_and_places_old_idempotency_keys(
    fresh_database_url: str,
) -> None:
    params = {"order": uuid.uuid4(), "step": uuid.uuid4(), "refund": uuid.uuid4(), "t0": T0}
    _old_database(fresh_database_url, 27, OLD_UNKEYED, params)
    keys = (
        "SELECT c.conrelid::regclass::text, array_agg(a.attname ORDER BY k.n)"
        " FROM pg_constraint AS c, unnest(c.conkey) WITH ORDINALITY AS k(attnum, n)"
        " JOIN pg_attribute AS a ON a.attnum = k.attnum"
        " WHERE c.contype IN ('p', 'u') AND a.attrelid = c.conrelid"
        " GROUP BY c.oid, c.conrelid ORDER BY 1, 2"
    )
    with psycopg.connect(fresh_database_url, autocommit=True) as conn:
        before, after = _across(conn, 27, keys)
        attempts = conn.execute("SELECT order_id, step_id FROM finished_attempts").fetchall()
        placed = conn.execute(
            "SELECT user_id, placement FROM api_idempotency ORDER BY user_id"
        ).fetchall()
    order_scoped = {
        "orders",
        "workflow_steps",
        "finished_attempts",
        "outbox",
        "audit_log",
        "refunds",
        "processed_events",
    }
    assert ("finished_attempts", ["step_id", "attempt"]) in before
    for table, columns in after:
        if table in order_scoped:
            assert columns[0] == "order_id", (table, columns)
    assert ("api_idempotency", ["placement", "user_id", "scope", "key"]) in after
    assert attempts == [(params["order"], params["step"])]
    # Computed as the store computes them: a create's from its key, a refund's is its order
    assert placed == [
        ("alice", ids.idempotency_placement("alice", "create_order", "k-1")),
        ("bob", params["order"]),
    ]
    found = asyncio.run(_find(fresh_database_url, "alice", "create_order", "k-1"))
    assert found is not None
    assert found.resource_id == params["order"]


async def _find(url: str, user: str, scope: str, key: str) -> ApiIdempotency | None:
    async with PgOrderStore.open(url) as store:
        return await store.find_idempotency(user, scope, key)


OLD_AUDIT = (
    """
INSERT INTO audit_log (order_id, at, actor, action, outcome, details)
VALUES (%(order)s, %(t0)s, 'api', 'create', 'accepted', '{"n": 1}'),
       (%(order)s, %(t1)s, 'worker', 'ship', 'shipped', '{}'),
       (%(other)s, %(t2)s, 'api', 'create', 'accepted', '{}')
""",
)
AUDIT_ROWS = (
    "SELECT id, tableoid::regclass::text, order_id, at, actor, action, outcome, details"
    " FROM audit_log ORDER BY id"
)


def test_0041_partitions_the_audit_log_by_month_keeping_every_entry_and_its_numbering(
    fresh_database_url: str, tmp_path: Path
) -> None:
    params = {
        "order": uuid.uuid4(),
        "other": uuid.uuid4(),
        "t0": T0,  # 2026-01-01 12:00 UTC
        "t1": datetime(2026, 1, 31, 23, 59, 59, tzinfo=UTC),
        "t2": datetime(2026, 3, 1, tzinfo=UTC),  # February has none: no partition for it
    }
    _old_database(fresh_database_url, 41, OLD_AUDIT, params)
    with psycopg.connect(fresh_database_url, autocommit=True) as conn:
        before, after = _across(conn, 41, AUDIT_ROWS)
        kind = conn.execute("SELECT relkind FROM pg_class WHERE oid = 'audit_log'::regclass")
        assert kind.fetchone() == ("p",)
        key = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'audit_log_pkey'"
        ).fetchone()
        assert key == ("PRIMARY KEY (order_id, id, at)",)
        new = conn.execute(
            "INSERT INTO audit_log (order_id, at, actor, action, outcome)"
            " VALUES (%(order)s, %(t0)s, 'api', 'cancel', 'accepted') RETURNING id",
            params,
        ).fetchone()
    assert [row[:1] + row[2:] for row in after] == [row[:1] + row[2:] for row in before]
    assert [row[1] for row in before] == ["audit_log"] * 3
    assert [row[1] for row in after] == ["audit_log_202601", "audit_log_202601", "audit_log_202603"]
    assert new is not None
    assert new[0] == before[-1][0] + 1  # numbering goes on where it stopped
    entries = asyncio.run(_audit(fresh_database_url, params["order"]))
    assert [(e.action, e.at) for e in entries] == [
        ("create", T0),
        ("ship", params["t1"]),
        ("cancel", T0),
    ]
    # The pruner works on it as on a fresh one: January (orders gone) dropped, March kept
    policy = Policy(orders_s=90 * DAY_S, feed_s=7 * DAY_S, idempotency_s=DAY_S, audit_s=400 * DAY_S)
    clock = FakeClock(datetime(2027, 3, 10, tzinfo=UTC))
    report = asyncio.run(Pruner(fresh_database_url, clock, policy, tmp_path).run())
    assert report is not None
    assert (report.audit_months_dropped, report.audit_entries) == (1, 3)
    assert report.audit_months_created == 3
    with psycopg.connect(fresh_database_url) as conn:
        left = conn.execute(AUDIT_ROWS).fetchall()
        months = conn.execute(
            "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'audit_log'::regclass ORDER BY 1"
        ).fetchall()
    assert left == [after[2]]
    assert [m[0] for m in months] == [
        "audit_log_202603",
        "audit_log_202703",
        "audit_log_202704",
        "audit_log_202705",
        "audit_log_default",
    ]


async def _audit(url: str, order_id: uuid.UUID) -> list[AuditEntry]:
    async with PgOrderStore.open(url) as store:
        return await store.audit_entries(order_id)
