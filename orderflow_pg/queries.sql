-- aggregate_of --
-- A fragment, not a statement: one order's aggregate as three jsonb columns, `order_row`, its
-- `step_rows` (each step with its earlier attempts as `attempt_rows`; the latest attempt is on
-- the step's row) and its `refund_rows`. The statements below that return an aggregate put it
-- among their columns by the mark `@aggregate_of(order=ID, orders=REL, steps=REL)` in a block
-- comment (queries.py):
-- ID is the order's id (a bound parameter, or a column of the statement's own rows), and the
-- order and step rows are read from REL: the tables, or a statement's CTE of the rows it
-- locked (a row locked after a wait is its newest version, which a read of the table under
-- the statement's snapshot could predate). Attempts are a correlated subquery per step:
-- always the primary key's index.
    (SELECT to_jsonb(agg_o) FROM {orders} AS agg_o WHERE agg_o.order_id = {order}) AS order_row,
    (SELECT coalesce(jsonb_agg(
        to_jsonb(agg_s) || jsonb_build_object('attempt_rows', (
            SELECT coalesce(jsonb_agg(to_jsonb(agg_a) ORDER BY agg_a.attempt), '[]')
            FROM finished_attempts AS agg_a
            WHERE agg_a.order_id = {order} AND agg_a.step_id = agg_s.step_id))
        ORDER BY agg_s.seq), '[]')
     FROM {steps} AS agg_s WHERE agg_s.order_id = {order}) AS step_rows,
    (SELECT coalesce(jsonb_agg(to_jsonb(agg_r) ORDER BY agg_r.created_at, agg_r.refund_id), '[]')
     FROM refunds AS agg_r WHERE agg_r.order_id = {order}) AS refund_rows

-- lock_aggregate --
-- One order's aggregate (`aggregate_of`); the order and step rows stay locked until commit,
-- so a concurrent claim skips the steps while a decision is applied.
WITH o AS (
    SELECT * FROM orders WHERE order_id = %(order_id)s FOR UPDATE
), s AS (
    SELECT * FROM workflow_steps WHERE order_id = %(order_id)s ORDER BY seq FOR UPDATE
)
SELECT /*@aggregate_of(order=%(order_id)s, orders=o, steps=s)*/

-- lock_aggregates --
-- Several orders' aggregates, one row each, all locked until commit. The orders are locked in
-- order_id order (as every multi-order writer does, so two batches never wait on each other in
-- a cycle), then their steps.
WITH o AS (
    SELECT * FROM orders WHERE order_id = ANY(%(order_ids)s::uuid[]) ORDER BY order_id FOR UPDATE
), s AS (
    -- The ids themselves, beside the semi-join to `o` (which keeps the orders locked before
    -- their steps): the join alone, estimated from default statistics, hashed a sequential
    -- scan of every step, the whole table each call.
    SELECT * FROM workflow_steps
    WHERE order_id = ANY(%(order_ids)s::uuid[]) AND order_id IN (SELECT order_id FROM o)
    ORDER BY order_id, seq
    FOR UPDATE
)
SELECT /*@aggregate_of(order=o.order_id, orders=o, steps=s)*/
FROM o

-- get_aggregate --
-- The same aggregate unlocked; one statement, so one consistent snapshot
SELECT /*@aggregate_of(order=%(order_id)s, orders=orders, steps=workflow_steps)*/

-- get_order_view --
-- The unlocked aggregate and the order's history in one statement, so from one snapshot: the
-- order's state is always the `to` of its last history entry (two statements could each see
-- another commit)
SELECT /*@aggregate_of(order=%(order_id)s, orders=orders, steps=workflow_steps)*/,
    (SELECT coalesce(jsonb_agg(to_jsonb(h) ORDER BY h.seq), '[]')
     FROM order_history AS h WHERE h.order_id = %(order_id)s) AS history_rows

-- apply_changes --
-- Write decided changes of one or more orders in one statement from a jsonb array of documents
-- (one per change, keys in writes.py; no two documents of one order). A fenced document
-- (`guarded_step` present) writes its step only under the generation that computed it, and its
-- other parts only if that step was written: a stale change leaves nothing, and the documents
-- beside it are written all the same. Foreign keys are checked at the end of the statement, so
-- the parts may reference each other; events and audit keep the documents' order.
-- A document decided on a copy of the order the store kept from its own last write
-- (`expect_version`, `expect_steps`) is written only if, under row locks taken here (orders in
-- order_id order, then their live steps), the order's version and every live step's (id,
-- attempt, status) are still the copy's; otherwise nothing of it is written and the store
-- reads the order and decides again. Every write of an order raises its version, so only what
-- changes a step without writing its order needs the step rows: a claim (`claim_due`, which
-- takes only pending, retry-scheduled and running steps) and a lease renewal (which changes
-- none of the three). Finished steps are neither locked nor compared: each lock is a WAL record.
-- Nor is a document's guarded step: its update (`guarded`) holds only under the generation the
-- change was decided under, re-checked on the newest row version, and locks the row itself.
-- Steps and earlier attempts are inserted plainly (`new_steps`, `new_attempts`) or updated
-- (`steps`, `attempts`): writes.py knows which from the aggregate the change was decided on,
-- and an upsert's speculative insertion costs a WAL record of its own per row. A step's latest
-- attempt, under way or ended, is columns of its row (`latest_*`); an attempt becomes a
-- `finished_attempts` row when the next one starts.
-- One row per document says whether it was applied.
-- `apply_order_changes` is this statement for the documents of one order (parameter
-- `order_id`): each `/*@order x*/` below becomes `x.order_id = <that id> AND` (queries.py), so
-- on Citus every part of it is pruned to that order's shard (docs/citus.md); and its row
-- locks (`-- @locked`) are left out: Citus runs this statement as single-shard parts and
-- locks rows only in a statement of its own, so the store holds the order's row lock before
-- (`lock_aggregate` or `claim_order` in the same transaction), which every writer of the
-- order's live steps takes first.
WITH docs AS (
    SELECT t.i, t.d FROM jsonb_array_elements(%(docs)s::jsonb) WITH ORDINALITY AS t(d, i)
), held AS (
    SELECT docs.i, o.order_id
    FROM docs JOIN orders AS o ON o.order_id = (docs.d ->> 'expect_order')::uuid
    WHERE /*@order o*/ docs.d ? 'expect_version' AND o.version = (docs.d ->> 'expect_version')::bigint
    ORDER BY o.order_id
    FOR UPDATE OF o  -- @locked
), held_steps AS (
    SELECT s.order_id, s.step_id, s.attempt, s.status
    FROM workflow_steps AS s
    WHERE /*@order s*/ s.order_id IN (SELECT held.order_id FROM held)
      AND s.status IN ('pending', 'retry_scheduled', 'running')
      AND s.step_id <> ALL (ARRAY(
          SELECT (g.d -> 'guarded_step' ->> 'step_id')::uuid FROM docs AS g
          WHERE g.d ? 'guarded_step'))
    ORDER BY s.order_id, s.seq
    FOR UPDATE  -- @locked
), verified AS (
    SELECT held.i FROM held JOIN docs ON docs.i = held.i
    WHERE docs.d -> 'expect_steps' = (
        SELECT coalesce(jsonb_agg(
            jsonb_build_array(hs.step_id::text, hs.attempt, hs.status) ORDER BY hs.step_id::text
        ), '[]')
        FROM held_steps AS hs WHERE hs.order_id = held.order_id)
), guarded AS (
    UPDATE workflow_steps AS s SET
        status = r.status, attempt = r.attempt, max_attempts = r.max_attempts,
        armed_attempt = r.armed_attempt, next_attempt_at = r.next_attempt_at,
        lease_owner = r.lease_owner, lease_expires_at = r.lease_expires_at,
        last_error = r.last_error, result = r.result, refund_id = r.refund_id,
        latest_attempt = r.latest_attempt, latest_started_at = r.latest_started_at,
        latest_worker = r.latest_worker, latest_finished_at = r.latest_finished_at,
        latest_outcome = r.latest_outcome, latest_error = r.latest_error
    FROM docs, jsonb_populate_record(NULL::workflow_steps, docs.d -> 'guarded_step') AS r
    WHERE docs.d ? 'guarded_step'
      -- Pairs each document with its own step before its record is built: matched on the
      -- record's fields alone, every step was paired with every document and the record built
      -- for each pair (n² calls of jsonb_populate_record for a batch of n).
      AND /*@order s*/ s.step_id = (docs.d -> 'guarded_step' ->> 'step_id')::uuid
      AND s.order_id = r.order_id AND s.seq = r.seq AND s.step_id = r.step_id
      AND s.order_id = ANY (ARRAY(
          SELECT (g.d -> 'guarded_step' ->> 'order_id')::uuid FROM docs AS g
          WHERE g.d ? 'guarded_step'))
      AND s.seq = ANY (ARRAY(
          SELECT (g.d -> 'guarded_step' ->> 'seq')::integer FROM docs AS g
          WHERE g.d ? 'guarded_step'))
      AND s.attempt = (docs.d ->> 'guard_attempt')::integer
      AND s.lease_owner = docs.d ->> 'guard_owner'
      AND s.status = 'running'
      AND (NOT (docs.d ? 'expect_version') OR docs.i IN (SELECT verified.i FROM verified))
    RETURNING docs.i
), fence AS (
    SELECT docs.i, docs.d FROM docs
    WHERE (NOT (docs.d ? 'guarded_step') OR docs.i IN (SELECT guarded.i FROM guarded))
      AND (NOT (docs.d ? 'expect_version') OR docs.i IN (SELECT verified.i FROM verified))
), new_order AS (
    INSERT INTO orders (
        order_id, customer_id, items, total_minor, currency, process_version, state,
        created_at, updated_at, event_seq, state_reason, reservation_id, reservation_status,
        reserved_at, reservation_expires_at, reservation_expired, payment_status,
        payment_reference, attention_reason, attention_since, trace_parent
    )
    SELECT
        r.order_id, r.customer_id, r.items, r.total_minor, r.currency, r.process_version,
        r.state, r.created_at, r.updated_at, r.event_seq, r.state_reason, r.reservation_id,
        r.reservation_status, r.reserved_at, r.reservation_expires_at, r.reservation_expired,
        r.payment_status, r.payment_reference, r.attention_reason, r.attention_since,
        r.trace_parent
    FROM fence, jsonb_populate_record(NULL::orders, fence.d -> 'new_order') AS r
    WHERE fence.d ? 'new_order'
), changed_order AS (
    UPDATE orders AS o SET
        customer_id = r.customer_id, items = r.items, total_minor = r.total_minor,
        currency = r.currency, process_version = r.process_version, state = r.state,
        created_at = r.created_at, updated_at = r.updated_at, event_seq = r.event_seq,
        state_reason = r.state_reason, reservation_id = r.reservation_id,
        reservation_status = r.reservation_status, reserved_at = r.reserved_at,
        reservation_expires_at = r.reservation_expires_at,
        reservation_expired = r.reservation_expired, payment_status = r.payment_status,
        payment_reference = r.payment_reference, attention_reason = r.attention_reason,
        attention_since = r.attention_since, version = o.version + 1
    FROM fence, jsonb_populate_record(NULL::orders, fence.d -> 'order') AS r
    WHERE /*@order o*/ fence.d ? 'order' AND o.order_id = r.order_id
), new_steps AS (
    INSERT INTO workflow_steps (
        step_id, order_id, kind, seq, status, idempotency_key, created_at, attempt,
        max_attempts, armed_attempt, next_attempt_at, lease_owner, lease_expires_at,
        last_error, result, refund_id, latest_attempt, latest_started_at, latest_worker,
        latest_finished_at, latest_outcome, latest_error
    )
    SELECT
        r.step_id, r.order_id, r.kind, r.seq, r.status, r.idempotency_key, r.created_at,
        r.attempt, r.max_attempts, r.armed_attempt, r.next_attempt_at, r.lease_owner,
        r.lease_expires_at, r.last_error, r.result, r.refund_id, r.latest_attempt,
        r.latest_started_at, r.latest_worker, r.latest_finished_at, r.latest_outcome,
        r.latest_error
    FROM fence, jsonb_populate_recordset(NULL::workflow_steps, fence.d -> 'new_steps') AS r
), steps AS (
    UPDATE workflow_steps AS s SET
        status = r.status, attempt = r.attempt, max_attempts = r.max_attempts,
        armed_attempt = r.armed_attempt, next_attempt_at = r.next_attempt_at,
        lease_owner = r.lease_owner, lease_expires_at = r.lease_expires_at,
        last_error = r.last_error, result = r.result, refund_id = r.refund_id,
        latest_attempt = r.latest_attempt, latest_started_at = r.latest_started_at,
        latest_worker = r.latest_worker, latest_finished_at = r.latest_finished_at,
        latest_outcome = r.latest_outcome, latest_error = r.latest_error
    FROM fence, jsonb_populate_recordset(NULL::workflow_steps, fence.d -> 'steps') AS r
    WHERE /*@order s*/ s.order_id = r.order_id AND s.seq = r.seq AND s.step_id = r.step_id
      AND s.order_id = ANY (ARRAY(
          SELECT (e ->> 'order_id')::uuid
          FROM fence, jsonb_array_elements(fence.d -> 'steps') AS e))
      AND s.seq = ANY (ARRAY(
          SELECT (e ->> 'seq')::integer
          FROM fence, jsonb_array_elements(fence.d -> 'steps') AS e))
), new_attempts AS (
    INSERT INTO finished_attempts (
        order_id, step_id, attempt, started_at, worker, finished_at, outcome, error
    )
    SELECT
        r.order_id, r.step_id, r.attempt, r.started_at, r.worker, r.finished_at, r.outcome,
        r.error
    FROM fence, jsonb_populate_recordset(NULL::finished_attempts, fence.d -> 'new_attempts') AS r
), attempts AS (
    UPDATE finished_attempts AS a SET
        started_at = r.started_at, worker = r.worker, finished_at = r.finished_at,
        outcome = r.outcome, error = r.error
    FROM fence, jsonb_populate_recordset(NULL::finished_attempts, fence.d -> 'attempts') AS r
    WHERE /*@order a*/ a.order_id = r.order_id AND a.step_id = r.step_id AND a.attempt = r.attempt
      AND a.order_id = ANY (ARRAY(
          SELECT (e ->> 'order_id')::uuid
          FROM fence, jsonb_array_elements(fence.d -> 'attempts') AS e))
), refunds AS (
    INSERT INTO refunds (
        refund_id, order_id, amount_minor, reason, status, requested_by, created_at,
        updated_at, step_id, refund_reference, last_error
    )
    SELECT
        r.refund_id, r.order_id, r.amount_minor, r.reason, r.status, r.requested_by,
        r.created_at, r.updated_at, r.step_id, r.refund_reference, r.last_error
    FROM fence, jsonb_populate_recordset(NULL::refunds, fence.d -> 'refunds') AS r
    ON CONFLICT (order_id, refund_id) DO UPDATE SET
        amount_minor = EXCLUDED.amount_minor, reason = EXCLUDED.reason,
        status = EXCLUDED.status, updated_at = EXCLUDED.updated_at,
        refund_reference = EXCLUDED.refund_reference, last_error = EXCLUDED.last_error
), xact AS MATERIALIZED (
    -- Before any event is numbered the transaction takes its id and the writers' shared
    -- advisory lock: the relay's feed horizon waits for the transactions holding it
    -- (see `feed_horizon`)
    SELECT pg_current_xact_id() AS id, pg_advisory_xact_lock_shared(784215312)::text AS tagged
), events AS (
    -- An order's transitions are its events marked `transition` (the view order_history)
    INSERT INTO outbox (
        event_id, order_id, order_seq, transition, type, payload, order_id_left_out, created_at
    )
    SELECT
        r.event_id, r.order_id, r.order_seq, r.transition, r.type, r.payload,
        r.order_id_left_out, r.created_at
    FROM xact, fence,
        jsonb_populate_recordset(NULL::outbox, fence.d -> 'events') WITH ORDINALITY AS r
    -- The port's promise: a replayed event lands once (its id is its order's and number's).
    -- Checked on the statement's snapshot rather than by ON CONFLICT, whose speculative
    -- insertion costs a WAL record of its own per event: every writer of an order's events
    -- holds the order's row lock or its version fence, so an earlier writer of the same number
    -- is already committed and visible here; the unique key still refuses anything else.
    -- OFFSET 0 keeps the check a probe of outbox_order_seq_key per event: without it the
    -- generic plan turns it into a hash anti-join over the whole outbox.
    -- In the one-order form (Citus) the check is ON CONFLICT instead: a SELECT that reads no
    -- distributed table runs on the coordinator, so each event's feed number comes from the
    -- coordinator's sequence, in commit-horizon order (`feed_horizon`), not from a worker's.
    /*@many{*/ WHERE NOT EXISTS (
        SELECT FROM outbox AS o
        WHERE o.order_id = r.order_id AND o.order_seq = r.order_seq OFFSET 0) /*}@many*/
    ORDER BY fence.i, r.ordinality
    /*@one ON CONFLICT (order_id, order_seq) DO NOTHING */
), audit AS (
    INSERT INTO audit_log (order_id, at, actor, action, outcome, step_id, details)
    SELECT r.order_id, r.at, r.actor, r.action, r.outcome, r.step_id, r.details
    FROM fence,
        jsonb_populate_recordset(NULL::audit_log, fence.d -> 'audit') WITH ORDINALITY AS r
    ORDER BY fence.i, r.ordinality
), processed AS (
    INSERT INTO processed_events (event_id, order_id)
    SELECT (fence.d ->> 'processed_event_id')::uuid, (fence.d ->> 'order_id')::uuid
    FROM fence
    WHERE fence.d ? 'processed_event_id'
), idempotency AS (
    INSERT INTO api_idempotency (
        placement, user_id, scope, key, fingerprint, resource_id, created_at
    )
    SELECT r.placement, r.user_id, r.scope, r.key, r.fingerprint, r.resource_id, r.created_at
    FROM fence, jsonb_populate_record(NULL::api_idempotency, fence.d -> 'idempotency') AS r
    WHERE fence.d ? 'idempotency'
), announce AS (
    -- Wake idle executors (LISTEN orderflow_steps) once if a written document made a step due
    -- now (`announce`, set by writes.py); steps due later are found by the poll.
    SELECT pg_notify('orderflow_steps', '')::text AS sent
    FROM fence WHERE fence.d ? 'announce' LIMIT 1
)
SELECT
    docs.i AS i,
    EXISTS (SELECT 1 FROM fence WHERE fence.i = docs.i) AS applied,
    (SELECT count(*) FROM announce) AS announced
FROM docs ORDER BY docs.i

-- is_processed_event --
-- Whether an event was already applied to an order
SELECT 1 AS found FROM processed_events
WHERE order_id = %(order_id)s AND event_id = %(event_id)s

-- find_idempotency --
-- The record an idempotency key is bound to (its placement computed from the key,
-- `ids.idempotency_placement`)
SELECT * FROM api_idempotency
WHERE placement = %(placement)s
  AND user_id = %(user_id)s AND scope = %(scope)s AND key = %(key)s

-- history --
-- Every transition of one order, oldest first (the view over its events)
SELECT * FROM order_history WHERE order_id = %(order_id)s ORDER BY seq

-- audit_entries --
-- The audit log of one order, oldest first
SELECT * FROM audit_log WHERE order_id = %(order_id)s ORDER BY id

-- list_orders --
-- Orders newest first, optionally one customer's or one state's, strictly before a keyset cursor
SELECT * FROM orders
WHERE (%(customer_id)s::text IS NULL OR customer_id = %(customer_id)s::text)
  AND (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(before_at)s::timestamptz IS NULL
       OR (created_at, order_id) < (%(before_at)s::timestamptz, %(before_id)s::uuid))
ORDER BY created_at DESC, order_id DESC
LIMIT %(limit)s

-- list_waiting_orders --
-- Orders waiting for a person, newest waiting first (the partial index orders_waiting_idx),
-- optionally one customer's or one state's, strictly before a keyset cursor on the wait's start
SELECT * FROM orders
WHERE attention_reason IS NOT NULL
  AND (%(customer_id)s::text IS NULL OR customer_id = %(customer_id)s::text)
  AND (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(before_at)s::timestamptz IS NULL
       OR (attention_since, order_id) < (%(before_at)s::timestamptz, %(before_id)s::uuid))
ORDER BY attention_since DESC, order_id DESC
LIMIT %(limit)s

-- count_orders --
-- How many orders are in each state, and of those how many wait for each reason (a full scan:
-- for the operator's console, not for a hot path)
SELECT state, attention_reason, count(*) AS orders
FROM orders
GROUP BY state, attention_reason

-- claim_due --
-- Lease due steps and steps whose lease expired: attempt + 1, owner, expiry, in one statement.
-- The candidates are the first rows of each branch's own partial index, read without locks (an
-- ordered scan, so the cost is the number of live steps, never the number of finished ones).
-- Earliest first, each candidate's order is locked (SKIP LOCKED) until `limit` are held, then
-- their steps are updated: orders before steps, as every writer locks them, and no wait for
-- an order. So a claim whose transaction goes on to write the intents it starts
-- (`claim_and_start`) holds no step of an order it did not lock, and waits for nobody who
-- could be waiting for it (at most for a lease renewal's own short statement).
-- Each claimed step comes with its order's aggregate as `lock_aggregates` returns it, read
-- from the statement's snapshot, so as it was before the claim (the store puts the claim in);
-- it is what the store decides the attempt's start on, and the start's write checks under the
-- row locks that the order is still as read (its version, its live steps), and reads it again
-- if not.
WITH candidates AS (
    (SELECT order_id, seq, next_attempt_at AS due_at
     FROM workflow_steps
     WHERE status IN ('pending', 'retry_scheduled') AND next_attempt_at <= %(now)s
     ORDER BY next_attempt_at
     LIMIT %(window)s)
    UNION ALL
    (SELECT order_id, seq, lease_expires_at AS due_at
     FROM workflow_steps
     WHERE status = 'running' AND lease_expires_at <= %(now)s
     ORDER BY lease_expires_at
     LIMIT %(window)s)
), owned AS (
    SELECT c.order_id, c.seq
    FROM candidates AS c JOIN orders AS o ON o.order_id = c.order_id
    ORDER BY c.due_at
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
), claimed AS (
    -- Checked again on the row's newest version: a step another claim took and committed
    -- since this statement's snapshot is left (a CASE, so the check is no index condition:
    -- each owned step is found by its key).
    UPDATE workflow_steps AS s SET
        status = 'running',
        attempt = s.attempt + 1,
        lease_owner = %(owner)s,
        lease_expires_at = %(expires_at)s
    FROM owned
    WHERE s.order_id = owned.order_id AND s.seq = owned.seq
      AND CASE s.status
          WHEN 'pending' THEN s.next_attempt_at <= %(now)s
          WHEN 'retry_scheduled' THEN s.next_attempt_at <= %(now)s
          WHEN 'running' THEN s.lease_expires_at <= %(now)s
          ELSE false
      END
    RETURNING s.step_id, s.order_id, s.kind, s.attempt, s.lease_owner, s.lease_expires_at
)
SELECT
    c.step_id, c.order_id, c.kind, c.attempt, c.lease_owner, c.lease_expires_at,
    /*@aggregate_of(order=c.order_id, orders=orders, steps=workflow_steps)*/
FROM claimed AS c

-- claim_candidates --
-- On Citus (docs/citus.md): the steps a claim would consider, earliest due first, read
-- without any lock (a multi-shard read; Citus takes row locks only in one-shard statements).
-- Each is then claimed through its order alone (`claim_order`).
SELECT order_id, seq, due_at FROM (
    (SELECT order_id, seq, next_attempt_at AS due_at
     FROM workflow_steps
     WHERE status IN ('pending', 'retry_scheduled') AND next_attempt_at <= %(now)s
     ORDER BY next_attempt_at
     LIMIT %(window)s)
    UNION ALL
    (SELECT order_id, seq, lease_expires_at AS due_at
     FROM workflow_steps
     WHERE status = 'running' AND lease_expires_at <= %(now)s
     ORDER BY lease_expires_at
     LIMIT %(window)s)
) AS c
ORDER BY due_at
LIMIT %(window)s

-- claim_order --
-- On Citus: `claim_due` for the candidate steps `seqs` of one order (a one-shard statement):
-- the order is locked unless another holds it (SKIP LOCKED), each step re-checked on its
-- newest row and leased, and the claimed steps returned with the order's aggregate as the
-- statement's snapshot read it (as `claim_due` returns them).
WITH owned AS (
    SELECT o.order_id FROM orders AS o WHERE o.order_id = %(order_id)s
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE workflow_steps AS s SET
        status = 'running',
        attempt = s.attempt + 1,
        lease_owner = %(owner)s,
        lease_expires_at = %(expires_at)s
    WHERE s.order_id = %(order_id)s AND s.seq = ANY (%(seqs)s::integer[])
      AND EXISTS (SELECT FROM owned)
      -- (a searched CASE: Citus 13 sends `CASE s.status WHEN ...` to the shard as text = bool)
      AND CASE
          WHEN s.status IN ('pending', 'retry_scheduled') THEN s.next_attempt_at <= %(now)s
          WHEN s.status = 'running' THEN s.lease_expires_at <= %(now)s
          ELSE false
      END
    RETURNING s.step_id, s.order_id, s.kind, s.attempt, s.lease_owner, s.lease_expires_at
)
SELECT
    c.step_id, c.order_id, c.kind, c.attempt, c.lease_owner, c.lease_expires_at,
    /*@aggregate_of(order=%(order_id)s, orders=orders, steps=workflow_steps)*/
FROM claimed AS c

-- citus_installed --
-- Whether this database has the Citus extension (then `citus_tables` may be read)
SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') AS installed

-- citus_tables --
-- The tables Citus distributes or replicates in this database, and how
SELECT logicalrelid::regclass::text AS name, partmethod AS method FROM pg_dist_partition

-- renew_lease --
-- Extend a lease only while the claimer still holds it under the same generation
UPDATE workflow_steps SET lease_expires_at = %(expires_at)s
WHERE order_id = %(order_id)s
  AND step_id = %(step_id)s
  AND attempt = %(attempt)s
  AND lease_owner = %(owner)s
  AND status = 'running'
  AND lease_expires_at > %(now)s

-- events --
-- The published feed after a feed number, in feed order (an event's feed number is its seq).
-- A payload stored without its order's id (`order_id_left_out`, `rows.event_doc`) has it put
-- back here, so every event reads as it was emitted.
SELECT event_id, order_id, type,
    CASE WHEN order_id_left_out THEN payload || jsonb_build_object('order_id', order_id)
         ELSE payload END AS payload,
    created_at, seq
FROM outbox
WHERE seq > %(after)s AND seq <= (SELECT published_through FROM outbox_feed)
ORDER BY seq LIMIT %(limit)s

-- feed_horizon --
-- The newest committed seq, and the transactions of this database that may still commit a
-- smaller one: every writer of events holds the writers' advisory lock and a transaction id
-- before it numbers one, and the list is read after this statement's snapshot, so a seq
-- handed out before the snapshot belongs to a visible row or to a transaction listed here (or
-- one already ended). Transactions that only read or lock rows are not waited for.
SELECT
    (SELECT seq FROM outbox ORDER BY seq DESC LIMIT 1) AS top,
    ARRAY(
        SELECT a.backend_xid::text
        FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
        WHERE l.locktype = 'advisory' AND l.classid = 0 AND l.objid = 784215312
          AND l.objsubid = 1 AND l.granted
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND a.backend_xid IS NOT NULL
    ) AS writing

-- unpublished_events --
-- What the relay has not yet published up to a safe horizon, oldest first (each payload with
-- its order's id put back, as in `events`)
SELECT event_id, order_id, type,
    CASE WHEN order_id_left_out THEN payload || jsonb_build_object('order_id', order_id)
         ELSE payload END AS payload,
    created_at, seq
FROM outbox
WHERE seq > (SELECT published_through FROM outbox_feed) AND seq <= %(through)s
ORDER BY seq LIMIT %(limit)s

-- mark_published --
-- Publish the feed through a seq: one row written however many events the batch holds
UPDATE outbox_feed SET published_through = %(through)s WHERE published_through < %(through)s

-- autovacuum --
-- Whether the server refreshes table statistics by itself (start-up warns when it does not)
SELECT current_setting('autovacuum') AS autovacuum

-- ping --
-- Whether the database answers at all
SELECT 1 AS ok

-- principal_for_token_hash --
-- The enabled user a token hash belongs to. The same statement marks the user as used, but only
-- when its mark is older than `stale_before`: a user's row is written at most once per such
-- interval however many requests it makes (and the API asks only once per token cache period).
WITH found AS (
    SELECT user_id, role FROM users
    WHERE token_hash = %(token_hash)s AND disabled_at IS NULL
), touched AS (
    UPDATE users SET last_used_at = %(now)s
    WHERE token_hash = %(token_hash)s AND disabled_at IS NULL
      AND (last_used_at IS NULL OR last_used_at < %(stale_before)s)
)
SELECT user_id, role FROM found

-- create_user --
-- A new user with its token hash; nothing (and no row returned) if the name is taken
INSERT INTO users (user_id, role, token_hash, created_at, token_set_at)
VALUES (%(user_id)s, %(role)s, %(token_hash)s, %(now)s, %(now)s)
ON CONFLICT (user_id) DO NOTHING
RETURNING user_id

-- replace_token --
-- Give a user another token hash, if it has a different one (a row only when it changed)
UPDATE users SET token_hash = %(token_hash)s, token_set_at = %(now)s
WHERE user_id = %(user_id)s AND token_hash <> %(token_hash)s
RETURNING user_id

-- disable_user --
-- Mark an enabled user disabled (a row only when it was enabled)
UPDATE users SET disabled_at = %(now)s
WHERE user_id = %(user_id)s AND disabled_at IS NULL
RETURNING user_id

-- enable_user --
-- Clear a user's disabled mark (a row only when it was disabled)
UPDATE users SET disabled_at = NULL
WHERE user_id = %(user_id)s AND disabled_at IS NOT NULL
RETURNING user_id

-- user_by_name --
-- One user's record (never its token hash)
SELECT user_id, role, created_at, token_set_at, disabled_at, last_used_at
FROM users WHERE user_id = %(user_id)s

-- list_users --
-- Every user's record, oldest first (never a token hash)
SELECT user_id, role, created_at, token_set_at, disabled_at, last_used_at
FROM users ORDER BY created_at, user_id

-- upsert_user --
-- Create a user or replace its role and token hash
INSERT INTO users (user_id, role, token_hash) VALUES (%(user_id)s, %(role)s, %(token_hash)s)
ON CONFLICT (user_id) DO UPDATE SET role = EXCLUDED.role, token_hash = EXCLUDED.token_hash

-- has_users --
-- Whether any user exists (seeding runs only on an empty table)
SELECT EXISTS (SELECT 1 FROM users) AS found

-- migration_lock --
-- Serialise migration runners across processes (session-level advisory lock)
SELECT pg_advisory_lock(%(lock_key)s)

-- migration_unlock --
-- Let the next migration runner in
SELECT pg_advisory_unlock(%(lock_key)s)

-- create_schema_migrations --
-- The ledger of applied migration files; created by the runner before the first migration
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL
)

-- schema_migrations_exists --
-- Whether the ledger exists yet (readiness must not create it)
SELECT to_regclass('schema_migrations') IS NOT NULL AS found

-- applied_migrations --
-- Every applied migration file with its checksum
SELECT version, name, checksum FROM schema_migrations ORDER BY version

-- record_migration --
-- Remember an applied migration file and its checksum
INSERT INTO schema_migrations (version, name, checksum, applied_at)
VALUES (%(version)s, %(name)s, %(checksum)s, %(applied_at)s)

-- distribute_table --
-- Citus: distribute a table by its order column, co-located with `orders` (`orders` itself
-- with `colocate_with` 'none': the group the others join); existing rows are moved into the
-- shards
SELECT create_distributed_table(
    %(table)s::regclass, %(column)s, colocate_with => %(colocate_with)s,
    shard_count => %(shard_count)s::integer)

-- reference_table --
-- Citus: replicate a small shared table on every node
SELECT create_reference_table(%(table)s::regclass)

-- drop_local_copy --
-- Citus: drop the rows a table held on the coordinator before it was distributed (copied
-- into its shards and invisible since)
SELECT truncate_local_data_after_distributing_table(%(table)s::regclass)

-- current_database --
-- The name of the database this connection is on
SELECT current_database() AS name
