-- lock_aggregate --
-- One order with its steps (each with its attempts) and its refunds as jsonb; the order and step
-- rows stay locked until commit, so a concurrent claim skips the steps while a decision is
-- applied. Attempts are a correlated subquery per step: always the primary key's index.
WITH o AS (
    SELECT * FROM orders WHERE order_id = %(order_id)s FOR UPDATE
), s AS (
    SELECT * FROM workflow_steps WHERE order_id = %(order_id)s ORDER BY seq FOR UPDATE
)
SELECT
    (SELECT to_jsonb(o) FROM o) AS order_row,
    (SELECT coalesce(jsonb_agg(
        to_jsonb(s) || jsonb_build_object('attempt_rows', (
            SELECT coalesce(jsonb_agg(to_jsonb(a) ORDER BY a.attempt), '[]')
            FROM step_attempts AS a WHERE a.step_id = s.step_id))
        ORDER BY s.seq), '[]') FROM s) AS step_rows,
    (SELECT coalesce(jsonb_agg(to_jsonb(r) ORDER BY r.created_at, r.refund_id), '[]')
     FROM refunds AS r WHERE r.order_id = %(order_id)s) AS refund_rows

-- get_aggregate --
-- The same aggregate unlocked; one statement, so one consistent snapshot
SELECT
    (SELECT to_jsonb(o) FROM orders AS o WHERE o.order_id = %(order_id)s) AS order_row,
    (SELECT coalesce(jsonb_agg(
        to_jsonb(s) || jsonb_build_object('attempt_rows', (
            SELECT coalesce(jsonb_agg(to_jsonb(a) ORDER BY a.attempt), '[]')
            FROM step_attempts AS a WHERE a.step_id = s.step_id))
        ORDER BY s.seq), '[]')
     FROM workflow_steps AS s WHERE s.order_id = %(order_id)s) AS step_rows,
    (SELECT coalesce(jsonb_agg(to_jsonb(r) ORDER BY r.created_at, r.refund_id), '[]')
     FROM refunds AS r WHERE r.order_id = %(order_id)s) AS refund_rows

-- apply_change --
-- Write a whole decided change in one statement from one jsonb document (keys in writes.py).
-- A fenced change (`guarded_step` present) writes its step only under the generation that
-- computed it, and every other part only if that step was written: a stale change leaves
-- nothing. Foreign keys are checked at the end of the statement, so the parts may reference
-- each other; history, events and audit keep the document's order.
WITH doc AS (
    SELECT %(doc)s::jsonb AS d
), guarded AS (
    UPDATE workflow_steps AS s SET
        status = r.status, attempt = r.attempt, max_attempts = r.max_attempts,
        armed_attempt = r.armed_attempt, next_attempt_at = r.next_attempt_at,
        lease_owner = r.lease_owner, lease_expires_at = r.lease_expires_at,
        last_error = r.last_error, result = r.result, refund_id = r.refund_id
    FROM doc, jsonb_populate_record(NULL::workflow_steps, doc.d -> 'guarded_step') AS r
    WHERE doc.d ? 'guarded_step'
      AND s.step_id = r.step_id
      AND s.attempt = (doc.d ->> 'guard_attempt')::integer
      AND s.lease_owner = doc.d ->> 'guard_owner'
      AND s.status = 'running'
    RETURNING s.step_id
), fence AS (
    SELECT NOT (d ? 'guarded_step') OR EXISTS (SELECT 1 FROM guarded) AS ok FROM doc
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
    FROM doc, jsonb_populate_record(NULL::orders, doc.d -> 'new_order') AS r
    WHERE doc.d ? 'new_order'
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
        attention_since = r.attention_since
    FROM doc, fence, jsonb_populate_record(NULL::orders, doc.d -> 'order') AS r
    WHERE doc.d ? 'order' AND fence.ok AND o.order_id = r.order_id
), steps AS (
    INSERT INTO workflow_steps (
        step_id, order_id, kind, seq, status, idempotency_key, created_at, attempt,
        max_attempts, armed_attempt, next_attempt_at, lease_owner, lease_expires_at,
        last_error, result, refund_id
    )
    SELECT
        r.step_id, r.order_id, r.kind, r.seq, r.status, r.idempotency_key, r.created_at,
        r.attempt, r.max_attempts, r.armed_attempt, r.next_attempt_at, r.lease_owner,
        r.lease_expires_at, r.last_error, r.result, r.refund_id
    FROM doc, fence, jsonb_populate_recordset(NULL::workflow_steps, doc.d -> 'steps') AS r
    WHERE fence.ok
    ON CONFLICT (step_id) DO UPDATE SET
        status = EXCLUDED.status, attempt = EXCLUDED.attempt,
        max_attempts = EXCLUDED.max_attempts, armed_attempt = EXCLUDED.armed_attempt,
        next_attempt_at = EXCLUDED.next_attempt_at, lease_owner = EXCLUDED.lease_owner,
        lease_expires_at = EXCLUDED.lease_expires_at, last_error = EXCLUDED.last_error,
        result = EXCLUDED.result, refund_id = EXCLUDED.refund_id
), attempts AS (
    INSERT INTO step_attempts (step_id, attempt, started_at, worker, finished_at, outcome, error)
    SELECT r.step_id, r.attempt, r.started_at, r.worker, r.finished_at, r.outcome, r.error
    FROM doc, fence, jsonb_populate_recordset(NULL::step_attempts, doc.d -> 'attempts') AS r
    WHERE fence.ok
    ON CONFLICT (step_id, attempt) DO UPDATE SET
        started_at = EXCLUDED.started_at, worker = EXCLUDED.worker,
        finished_at = EXCLUDED.finished_at, outcome = EXCLUDED.outcome, error = EXCLUDED.error
), refunds AS (
    INSERT INTO refunds (
        refund_id, order_id, amount_minor, reason, status, requested_by, created_at,
        updated_at, step_id, refund_reference, last_error
    )
    SELECT
        r.refund_id, r.order_id, r.amount_minor, r.reason, r.status, r.requested_by,
        r.created_at, r.updated_at, r.step_id, r.refund_reference, r.last_error
    FROM doc, fence, jsonb_populate_recordset(NULL::refunds, doc.d -> 'refunds') AS r
    WHERE fence.ok
    ON CONFLICT (refund_id) DO UPDATE SET
        amount_minor = EXCLUDED.amount_minor, reason = EXCLUDED.reason,
        status = EXCLUDED.status, updated_at = EXCLUDED.updated_at,
        refund_reference = EXCLUDED.refund_reference, last_error = EXCLUDED.last_error
), history AS (
    INSERT INTO order_history (order_id, seq, from_state, to_state, at, actor, reason)
    SELECT r.order_id, r.seq, r.from_state, r.to_state, r.at, r.actor, r.reason
    FROM doc, fence,
        jsonb_populate_recordset(NULL::order_history, doc.d -> 'history') WITH ORDINALITY AS r
    WHERE fence.ok
    ORDER BY r.ordinality
), events AS (
    INSERT INTO outbox (event_id, order_id, type, payload, created_at)
    SELECT r.event_id, r.order_id, r.type, r.payload, r.created_at
    FROM doc, fence,
        jsonb_populate_recordset(NULL::outbox, doc.d -> 'events') WITH ORDINALITY AS r
    WHERE fence.ok
    ORDER BY r.ordinality
    ON CONFLICT (event_id) DO NOTHING
), audit AS (
    INSERT INTO audit_log (order_id, at, actor, action, outcome, step_id, details)
    SELECT r.order_id, r.at, r.actor, r.action, r.outcome, r.step_id, r.details
    FROM doc, fence,
        jsonb_populate_recordset(NULL::audit_log, doc.d -> 'audit') WITH ORDINALITY AS r
    WHERE fence.ok
    ORDER BY r.ordinality
), processed AS (
    INSERT INTO processed_events (event_id, order_id)
    SELECT (doc.d ->> 'processed_event_id')::uuid, (doc.d ->> 'order_id')::uuid
    FROM doc, fence
    WHERE fence.ok AND doc.d ? 'processed_event_id'
), idempotency AS (
    INSERT INTO api_idempotency (user_id, scope, key, fingerprint, resource_id, created_at)
    SELECT r.user_id, r.scope, r.key, r.fingerprint, r.resource_id, r.created_at
    FROM doc, fence, jsonb_populate_record(NULL::api_idempotency, doc.d -> 'idempotency') AS r
    WHERE fence.ok AND doc.d ? 'idempotency'
)
SELECT ok AS applied FROM fence

-- is_processed_event --
-- Whether an event was already applied
SELECT 1 AS found FROM processed_events WHERE event_id = %(event_id)s

-- find_idempotency --
-- The record an idempotency key is bound to
SELECT * FROM api_idempotency
WHERE user_id = %(user_id)s AND scope = %(scope)s AND key = %(key)s

-- history --
-- Every transition of one order, oldest first
SELECT * FROM order_history WHERE order_id = %(order_id)s ORDER BY id

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
-- Each branch is an ordered scan of its own partial index that locks as it goes (SKIP LOCKED),
-- so the cost is the number of live steps, never the number of finished ones.
WITH due AS (
    SELECT step_id, next_attempt_at AS due_at
    FROM workflow_steps
    WHERE status IN ('pending', 'retry_scheduled') AND next_attempt_at <= %(now)s
    ORDER BY next_attempt_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), expired AS (
    SELECT step_id, lease_expires_at AS due_at
    FROM workflow_steps
    WHERE status = 'running' AND lease_expires_at <= %(now)s
    ORDER BY lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT step_id FROM (SELECT * FROM due UNION ALL SELECT * FROM expired) AS candidates
    ORDER BY due_at
    LIMIT %(limit)s
)
UPDATE workflow_steps AS s SET
    status = 'running',
    attempt = s.attempt + 1,
    lease_owner = %(owner)s,
    lease_expires_at = %(expires_at)s
FROM picked
WHERE s.step_id = picked.step_id
RETURNING s.step_id, s.order_id, s.kind, s.attempt, s.lease_owner, s.lease_expires_at

-- renew_lease --
-- Extend a lease only while the claimer still holds it under the same generation
UPDATE workflow_steps SET lease_expires_at = %(expires_at)s
WHERE step_id = %(step_id)s
  AND attempt = %(attempt)s
  AND lease_owner = %(owner)s
  AND status = 'running'
  AND lease_expires_at > %(now)s

-- events --
-- The published feed after a feed number, in publication order (seq is the feed number here)
SELECT event_id, order_id, type, payload, created_at, feed_seq AS seq
FROM outbox WHERE feed_seq > %(after)s ORDER BY feed_seq LIMIT %(limit)s

-- unpublished_events --
-- What the relay has not yet published, oldest first
SELECT * FROM outbox WHERE published_at IS NULL ORDER BY seq LIMIT %(limit)s

-- mark_published --
-- Publish events to the feed; the advisory lock makes feed numbers grow in commit order
WITH feed_lock AS (SELECT pg_advisory_xact_lock(784215311) AS locked)
UPDATE outbox SET published_at = %(now)s, feed_seq = nextval('outbox_feed_seq')
FROM feed_lock
WHERE seq = ANY(%(seqs)s) AND published_at IS NULL

-- ping --
-- Whether the database answers at all
SELECT 1 AS ok

-- principal_for_token_hash --
-- The user a token hash belongs to
SELECT user_id, role FROM users WHERE token_hash = %(token_hash)s

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
