"""The hot statements' plans on an analyzed database of a few thousand orders: each finds the
rows it writes or locks through an index, not by reading a whole table.

A group commit's step and attempt updates are unpacked by jsonb functions the planner takes for
100 rows each, joined with up to 100 documents: estimated at ~10,000 rows to update, a hash join
over a sequential scan of every step and every attempt looked cheaper than that many index
probes until the tables held some tens of thousands of rows, so each commit read the whole of
both (measured: PostgreSQL's CPU per order grew from 2.9 to 4.5 ms between 800 and 3,000
orders in `bench.worker_only`). The statements now also name the ids they touch, which the
planner estimates at ten and looks up. Likewise the check that an event is not already in the
outbox: written as a plain NOT EXISTS, the planner made it a hash anti-join over every event
ever written (the bench's orders/s fell by half within a few runs).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from orderflow_pg.queries import query

pytestmark = pytest.mark.postgres

ORDERS = 2_000
STEPS_PER_ORDER = 4
EVENTS_PER_ORDER = 7
HOT_TABLES = {"orders", "workflow_steps", "finished_attempts", "outbox"}

FILL = [
    """INSERT INTO orders (order_id, customer_id, items, total_minor, currency, process_version,
                           state, created_at, updated_at)
       SELECT md5(n::text)::uuid, 'c' || n %% 97, '[]', 100, 'RUB', 1, 'shipped', now(), now()
       FROM generate_series(1, %(orders)s) AS n""",
    """INSERT INTO workflow_steps (step_id, order_id, kind, seq, status, idempotency_key,
                                   created_at, max_attempts)
       SELECT md5(n::text || '/' || k)::uuid, md5(n::text)::uuid, 'ship', k, 'succeeded',
              n || '/' || k, now(), 5
       FROM generate_series(1, %(orders)s) AS n, generate_series(1, %(steps)s) AS k""",
    """INSERT INTO finished_attempts (order_id, step_id, attempt, started_at, worker, finished_at,
                                      outcome)
       SELECT order_id, step_id, 1, now(), 'w', now(), 'succeeded' FROM workflow_steps""",
    """INSERT INTO outbox (event_id, order_id, order_seq, type, payload, created_at)
       SELECT md5(n::text || '#' || k)::uuid, md5(n::text)::uuid, k, 'order.shipped', '{}', now()
       FROM generate_series(1, %(orders)s) AS n, generate_series(1, %(events)s) AS k""",
    "ANALYZE orders, workflow_steps, finished_attempts, outbox",
]


def _step(step_id: str, order_id: str) -> dict[str, Any]:
    return {
        "step_id": step_id, "order_id": order_id, "kind": "ship", "seq": 1,
        "status": "succeeded", "idempotency_key": "k", "created_at": "2026-01-01T00:00:00Z",
        "attempt": 1, "max_attempts": 5, "armed_attempt": 1, "result": {},
    }


def _attempt(step_id: str, order_id: str) -> dict[str, Any]:
    return {
        "order_id": order_id,
        "step_id": step_id, "attempt": 1, "started_at": "2026-01-01T00:00:00Z", "worker": "w",
        "finished_at": "2026-01-01T00:00:01Z", "outcome": "succeeded",
    }


def _result_documents(count: int) -> str:
    """A group commit's documents as the executor sends them: each a step result fenced by its
    guard, with an updated attempt, another step updated and the order written."""
    docs = []
    for _ in range(count):
        order_id, guarded, other = (str(uuid.uuid4()) for _ in range(3))
        docs.append({
            "guarded_step": _step(guarded, order_id), "guard_attempt": 1, "guard_owner": "w",
            "order": {"order_id": order_id}, "new_steps": [], "steps": [_step(other, order_id)],
            "new_attempts": [], "attempts": [_attempt(guarded, order_id)], "history": [],
            "events": [],
            "audit": [],
        })
    return json.dumps(docs)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan, this one first."""
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _scans(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """(node type, relation) of every node of a plan that reads one."""
    return [(n["Node Type"], n["Relation Name"]) for n in _nodes(plan) if "Relation Name" in n]


def _fill(conn: psycopg.Connection[Any]) -> None:
    for statement in FILL:
        conn.execute(
            statement, {"orders": ORDERS, "steps": STEPS_PER_ORDER, "events": EVENTS_PER_ORDER}
        )


def _explain(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> list[Any]:
    row = conn.execute("EXPLAIN (FORMAT JSON) " + query(name), params).fetchone()
    assert row is not None
    return _scans(row[0][0]["Plan"])


def test_a_group_commit_and_its_locking_read_use_indexes(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        _fill(conn)
        writes = _explain(conn, "apply_changes", {"docs": _result_documents(8)})
        ids = [uuid.uuid4() for _ in range(8)]
        reads = _explain(conn, "lock_aggregates", {"order_ids": ids})
    for scans in (writes, reads):
        assert {table for _, table in scans} & HOT_TABLES  # the plan does read them
        whole = [(kind, table) for kind, table in scans if kind == "Seq Scan"]
        assert not [hit for hit in whole if hit[1] in HOT_TABLES], scans


RUNNING = [
    """INSERT INTO orders (order_id, customer_id, items, total_minor, currency, process_version,
                           state, created_at, updated_at)
       SELECT o, 'c', '[]', 100, 'RUB', 1, 'shipping', now(), now()
       FROM unnest(%(orders)s::uuid[]) AS o""",
    """INSERT INTO workflow_steps (step_id, order_id, kind, seq, status, idempotency_key,
                                   created_at, attempt, max_attempts, lease_owner,
                                   lease_expires_at)
       SELECT s, o, 'ship', 1, 'running', s::text, now(), 1, 5, 'w',
              now() + interval '30 seconds'
       FROM unnest(%(steps)s::uuid[], %(orders)s::uuid[]) AS t(s, o)""",
    "ANALYZE workflow_steps",
]


def _guarded_function_calls(plan: dict[str, Any]) -> int:
    """How many times the `guarded` part of the write built a step record from a document."""
    guarded = next(n for n in _nodes(plan) if n.get("Subplan Name") == "CTE guarded")
    return sum(n["Actual Loops"] for n in _nodes(guarded) if n["Node Type"] == "Function Scan")


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
def test_a_group_commit_builds_each_guarded_step_record_once(pg_url: str, mode: str) -> None:
    """Matched on the built record's fields alone, each running step of the batch was paired
    with every document and a record built per pair: n² calls for a batch of n, the largest
    cost of a commit of a dozen results. Under a custom plan and the generic one a prepared
    statement settles on, the batch of 12 builds 12."""
    batch = 12
    orders = [str(uuid.uuid4()) for _ in range(batch)]
    steps = [str(uuid.uuid4()) for _ in range(batch)]
    docs = json.dumps([
        {
            "guarded_step": {**_step(step, order), "status": "succeeded"},
            "guard_attempt": 1, "guard_owner": "w", "new_steps": [], "steps": [],
            "new_attempts": [], "attempts": [], "history": [], "events": [], "audit": [],
        }
        for step, order in zip(steps, orders, strict=True)
    ])
    with psycopg.connect(pg_url) as conn:  # one transaction, rolled back at the end
        _fill(conn)
        for statement in RUNNING:
            conn.execute(statement, {"orders": orders, "steps": steps})
        conn.execute("SELECT set_config('plan_cache_mode', %s::text, true)", [mode])
        # PREPARE through the simple protocol: its `$1` is the prepared statement's own.
        prepare = "PREPARE apply_changes(jsonb) AS " + query("apply_changes")
        prepared = conn.pgconn.exec_(prepare.replace("%(docs)s", "$1").encode())
        assert prepared.status == psycopg.pq.ExecStatus.COMMAND_OK, prepared.error_message
        # EXECUTE's arguments cannot be bound parameters: the documents go as a literal that
        # psycopg quotes.
        explain = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE apply_changes({})")
        row = conn.execute(explain.format(sql.Literal(docs))).fetchone()
        assert row is not None
        applied = conn.execute(
            "SELECT count(*) FROM workflow_steps WHERE step_id = ANY(%s::uuid[])"
            " AND status = 'succeeded'", [steps]
        ).fetchone()
        conn.rollback()
    assert applied == (batch,)  # every result was written: the plan did the work
    assert _guarded_function_calls(row[0][0]["Plan"]) == batch
