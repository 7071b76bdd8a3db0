-- lock_order --
-- Lock one order row for the length of an update transaction
SELECT * FROM orders WHERE order_id = %(order_id)s FOR UPDATE

-- lock_steps --
-- Lock the order's step rows too, so a concurrent claim skips them while a decision is applied
SELECT * FROM workflow_steps WHERE order_id = %(order_id)s ORDER BY seq FOR UPDATE

-- get_order --
-- One order row, unlocked
SELECT * FROM orders WHERE order_id = %(order_id)s

-- get_steps --
-- The order's steps in creation order, unlocked
SELECT * FROM workflow_steps WHERE order_id = %(order_id)s ORDER BY seq

-- get_attempts --
-- Every attempt of every step of one order
SELECT a.*
FROM step_attempts a JOIN workflow_steps s USING (step_id)
WHERE s.order_id = %(order_id)s
ORDER BY a.step_id, a.attempt

-- get_refunds --
-- The order's refunds, oldest first
SELECT * FROM refunds WHERE order_id = %(order_id)s ORDER BY created_at, refund_id

-- snapshot --
-- Make a multi-statement read see one consistent state
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY

-- insert_order --
-- A new order row
INSERT INTO orders (
    order_id, customer_id, items, total_minor, currency, process_version, state, created_at,
    updated_at, event_seq, state_reason, reservation_id, reservation_status, reserved_at,
    reservation_expires_at, reservation_expired, payment_status, payment_reference
) VALUES (
    %(order_id)s, %(customer_id)s, %(items)s, %(total_minor)s, %(currency)s,
    %(process_version)s, %(state)s, %(created_at)s, %(updated_at)s, %(event_seq)s,
    %(state_reason)s, %(reservation_id)s, %(reservation_status)s, %(reserved_at)s,
    %(reservation_expires_at)s, %(reservation_expired)s, %(payment_status)s,
    %(payment_reference)s
)

-- update_order --
-- Rewrite the whole order row from the decided Order value
UPDATE orders SET
    customer_id = %(customer_id)s, items = %(items)s, total_minor = %(total_minor)s,
    currency = %(currency)s, process_version = %(process_version)s, state = %(state)s,
    created_at = %(created_at)s, updated_at = %(updated_at)s, event_seq = %(event_seq)s,
    state_reason = %(state_reason)s, reservation_id = %(reservation_id)s,
    reservation_status = %(reservation_status)s, reserved_at = %(reserved_at)s,
    reservation_expires_at = %(reservation_expires_at)s,
    reservation_expired = %(reservation_expired)s, payment_status = %(payment_status)s,
    payment_reference = %(payment_reference)s
WHERE order_id = %(order_id)s

-- upsert_step --
-- Insert a step or rewrite it whole
INSERT INTO workflow_steps (
    step_id, order_id, kind, seq, status, idempotency_key, created_at, attempt, max_attempts,
    armed_attempt, next_attempt_at, lease_owner, lease_expires_at, last_error, result, refund_id
) VALUES (
    %(step_id)s, %(order_id)s, %(kind)s, %(seq)s, %(status)s, %(idempotency_key)s,
    %(created_at)s, %(attempt)s, %(max_attempts)s, %(armed_attempt)s, %(next_attempt_at)s,
    %(lease_owner)s, %(lease_expires_at)s, %(last_error)s, %(result)s, %(refund_id)s
)
ON CONFLICT (step_id) DO UPDATE SET
    status = EXCLUDED.status, attempt = EXCLUDED.attempt, max_attempts = EXCLUDED.max_attempts,
    armed_attempt = EXCLUDED.armed_attempt, next_attempt_at = EXCLUDED.next_attempt_at,
    lease_owner = EXCLUDED.lease_owner, lease_expires_at = EXCLUDED.lease_expires_at,
    last_error = EXCLUDED.last_error, result = EXCLUDED.result, refund_id = EXCLUDED.refund_id

-- update_guarded_step --
-- Rewrite the step a result was computed for, only under the generation that computed it
UPDATE workflow_steps SET
    status = %(status)s, attempt = %(attempt)s, max_attempts = %(max_attempts)s,
    armed_attempt = %(armed_attempt)s, next_attempt_at = %(next_attempt_at)s,
    lease_owner = %(lease_owner)s, lease_expires_at = %(lease_expires_at)s,
    last_error = %(last_error)s, result = %(result)s, refund_id = %(refund_id)s
WHERE step_id = %(step_id)s
  AND attempt = %(guard_attempt)s
  AND lease_owner = %(guard_owner)s
  AND status = 'running'

-- upsert_attempt --
-- Insert an attempt's intent or record its result
INSERT INTO step_attempts (step_id, attempt, started_at, worker, finished_at, outcome, error)
VALUES (
    %(step_id)s, %(attempt)s, %(started_at)s, %(worker)s, %(finished_at)s, %(outcome)s,
    %(error)s
)
ON CONFLICT (step_id, attempt) DO UPDATE SET
    started_at = EXCLUDED.started_at, worker = EXCLUDED.worker,
    finished_at = EXCLUDED.finished_at, outcome = EXCLUDED.outcome, error = EXCLUDED.error

-- upsert_refund --
-- Insert a refund or rewrite it whole
INSERT INTO refunds (
    refund_id, order_id, amount_minor, reason, status, requested_by, created_at, updated_at,
    step_id, refund_reference, last_error
) VALUES (
    %(refund_id)s, %(order_id)s, %(amount_minor)s, %(reason)s, %(status)s, %(requested_by)s,
    %(created_at)s, %(updated_at)s, %(step_id)s, %(refund_reference)s, %(last_error)s
)
ON CONFLICT (refund_id) DO UPDATE SET
    amount_minor = EXCLUDED.amount_minor, reason = EXCLUDED.reason, status = EXCLUDED.status,
    updated_at = EXCLUDED.updated_at, refund_reference = EXCLUDED.refund_reference,
    last_error = EXCLUDED.last_error

-- insert_history --
-- One state change of an order
INSERT INTO order_history (order_id, seq, from_state, to_state, at, actor, reason)
VALUES (%(order_id)s, %(seq)s, %(from_state)s, %(to_state)s, %(at)s, %(actor)s, %(reason)s)

-- insert_event --
-- An outbox event; a replayed event id is ignored so consumers see it once
INSERT INTO outbox (event_id, order_id, type, payload, created_at)
VALUES (%(event_id)s, %(order_id)s, %(type)s, %(payload)s, %(created_at)s)
ON CONFLICT (event_id) DO NOTHING

-- insert_audit --
-- One audit entry
INSERT INTO audit_log (order_id, at, actor, action, outcome, step_id, details)
VALUES (%(order_id)s, %(at)s, %(actor)s, %(action)s, %(outcome)s, %(step_id)s, %(details)s)

-- insert_processed_event --
-- Remember that an event was applied so its replay is a no-op
INSERT INTO processed_events (event_id, order_id) VALUES (%(event_id)s, %(order_id)s)

-- is_processed_event --
-- Whether an event was already applied
SELECT 1 AS found FROM processed_events WHERE event_id = %(event_id)s

-- insert_idempotency --
-- Bind a client's idempotency key to the resource it created
INSERT INTO api_idempotency (user_id, scope, key, fingerprint, resource_id, created_at)
VALUES (
    %(user_id)s, %(scope)s, %(key)s, %(fingerprint)s, %(resource_id)s, %(created_at)s
)

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
