-- create_apply_order --
-- Citus: one order's change (one `apply_changes` document) written by a function that Citus
-- runs on the node holding the order's shard (`distribute_apply_order`), so the write commits
-- there alone, without two-phase commit (docs/citus.md, "Writes"). The same guards as
-- `apply_changes`: a document decided on a kept copy is written only if the order's version
-- and live steps are still the copy's; a fenced document only if its guarded step is still
-- under the generation it was decided under; otherwise nothing of it is written and the
-- function returns false. Separate statements, each on the order's shard alone: the one
-- statement of `apply_changes` is planned by Citus as parts whose intermediate results it
-- copies to every node, which made every node a participant of the commit. The store holds
-- the order's row lock before (`lock_aggregate` or `claim_order`). The events' feed numbers
-- (`seq`) come in the document, taken on the coordinator (`number_events`).
CREATE OR REPLACE FUNCTION orderflow_apply_order(p_order_id uuid, p_doc jsonb)
RETURNS boolean LANGUAGE plpgsql AS $fn$
DECLARE
    guarded_id uuid := (p_doc -> 'guarded_step' ->> 'step_id')::uuid;
BEGIN
    IF p_doc ? 'expect_version' THEN
        PERFORM FROM orders AS o
        WHERE o.order_id = p_order_id AND o.version = (p_doc ->> 'expect_version')::bigint;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
        IF p_doc -> 'expect_steps' IS DISTINCT FROM (
            SELECT coalesce(jsonb_agg(
                jsonb_build_array(s.step_id::text, s.attempt, s.status) ORDER BY s.step_id::text
            ), '[]')
            FROM workflow_steps AS s
            WHERE s.order_id = p_order_id
              AND s.status IN ('pending', 'retry_scheduled', 'running')
              AND s.step_id IS DISTINCT FROM guarded_id)
        THEN
            RETURN false;
        END IF;
    END IF;
    IF p_doc ? 'guarded_step' THEN
        UPDATE workflow_steps AS s SET
            status = r.status, attempt = r.attempt, max_attempts = r.max_attempts,
            armed_attempt = r.armed_attempt, next_attempt_at = r.next_attempt_at,
            lease_owner = r.lease_owner, lease_expires_at = r.lease_expires_at,
            last_error = r.last_error, result = r.result, refund_id = r.refund_id,
            latest_attempt = r.latest_attempt, latest_started_at = r.latest_started_at,
            latest_worker = r.latest_worker, latest_finished_at = r.latest_finished_at,
            latest_outcome = r.latest_outcome, latest_error = r.latest_error
        FROM jsonb_populate_record(NULL::workflow_steps, p_doc -> 'guarded_step') AS r
        WHERE s.order_id = p_order_id AND s.step_id = guarded_id
          AND s.seq = r.seq AND r.order_id = p_order_id
          AND s.attempt = (p_doc ->> 'guard_attempt')::integer
          AND s.lease_owner = p_doc ->> 'guard_owner'
          AND s.status = 'running';
        IF NOT FOUND THEN
            RETURN false;
        END IF;
    END IF;
    IF p_doc ? 'new_order' THEN
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
        FROM jsonb_populate_record(NULL::orders, p_doc -> 'new_order') AS r;
    END IF;
    IF p_doc ? 'order' THEN
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
        FROM jsonb_populate_record(NULL::orders, p_doc -> 'order') AS r
        WHERE o.order_id = p_order_id AND r.order_id = p_order_id;
    END IF;
    IF jsonb_array_length(coalesce(p_doc -> 'new_steps', '[]')) > 0 THEN
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
        FROM jsonb_populate_recordset(NULL::workflow_steps, p_doc -> 'new_steps') AS r;
    END IF;
    IF jsonb_array_length(coalesce(p_doc -> 'steps', '[]')) > 0 THEN
        UPDATE workflow_steps AS s SET
            status = r.status, attempt = r.attempt, max_attempts = r.max_attempts,
            armed_attempt = r.armed_attempt, next_attempt_at = r.next_attempt_at,
            lease_owner = r.lease_owner, lease_expires_at = r.lease_expires_at,
            last_error = r.last_error, result = r.result, refund_id = r.refund_id,
            latest_attempt = r.latest_attempt, latest_started_at = r.latest_started_at,
            latest_worker = r.latest_worker, latest_finished_at = r.latest_finished_at,
            latest_outcome = r.latest_outcome, latest_error = r.latest_error
        FROM jsonb_populate_recordset(NULL::workflow_steps, p_doc -> 'steps') AS r
        WHERE s.order_id = p_order_id AND r.order_id = p_order_id
          AND s.seq = r.seq AND s.step_id = r.step_id;
    END IF;
    IF jsonb_array_length(coalesce(p_doc -> 'new_attempts', '[]')) > 0 THEN
        INSERT INTO finished_attempts (
            order_id, step_id, attempt, started_at, worker, finished_at, outcome, error
        )
        SELECT
            r.order_id, r.step_id, r.attempt, r.started_at, r.worker, r.finished_at, r.outcome,
            r.error
        FROM jsonb_populate_recordset(NULL::finished_attempts, p_doc -> 'new_attempts') AS r;
    END IF;
    IF jsonb_array_length(coalesce(p_doc -> 'attempts', '[]')) > 0 THEN
        UPDATE finished_attempts AS a SET
            started_at = r.started_at, worker = r.worker, finished_at = r.finished_at,
            outcome = r.outcome, error = r.error
        FROM jsonb_populate_recordset(NULL::finished_attempts, p_doc -> 'attempts') AS r
        WHERE a.order_id = p_order_id AND r.order_id = p_order_id
          AND a.step_id = r.step_id AND a.attempt = r.attempt;
    END IF;
    IF jsonb_array_length(coalesce(p_doc -> 'refunds', '[]')) > 0 THEN
        INSERT INTO refunds (
            refund_id, order_id, amount_minor, reason, status, requested_by, created_at,
            updated_at, step_id, refund_reference, last_error
        )
        SELECT
            r.refund_id, r.order_id, r.amount_minor, r.reason, r.status, r.requested_by,
            r.created_at, r.updated_at, r.step_id, r.refund_reference, r.last_error
        FROM jsonb_populate_recordset(NULL::refunds, p_doc -> 'refunds') AS r
        ON CONFLICT (order_id, refund_id) DO UPDATE SET
            amount_minor = EXCLUDED.amount_minor, reason = EXCLUDED.reason,
            status = EXCLUDED.status, updated_at = EXCLUDED.updated_at,
            refund_reference = EXCLUDED.refund_reference, last_error = EXCLUDED.last_error;
    END IF;
    IF jsonb_array_length(coalesce(p_doc -> 'events', '[]')) > 0 THEN
        -- Each event's feed number (`seq`) was taken on the coordinator (`number_events`); a
        -- replayed event (its id is its order's and number's) lands once.
        INSERT INTO outbox (
            seq, event_id, order_id, order_seq, transition, type, payload, order_id_left_out,
            created_at
        )
        OVERRIDING SYSTEM VALUE
        SELECT
            r.seq, r.event_id, r.order_id, r.order_seq, r.transition, r.type, r.payload,
            r.order_id_left_out, r.created_at
        FROM jsonb_populate_recordset(NULL::outbox, p_doc -> 'events') AS r
        ON CONFLICT (order_id, order_seq) DO NOTHING;
    END IF;
    IF jsonb_array_length(coalesce(p_doc -> 'audit', '[]')) > 0 THEN
        INSERT INTO audit_log (order_id, at, actor, action, outcome, step_id, details)
        SELECT r.order_id, r.at, r.actor, r.action, r.outcome, r.step_id, r.details
        FROM jsonb_populate_recordset(NULL::audit_log, p_doc -> 'audit') WITH ORDINALITY AS r
        ORDER BY r.ordinality;
    END IF;
    IF p_doc ? 'processed_event_id' THEN
        INSERT INTO processed_events (event_id, order_id)
        VALUES ((p_doc ->> 'processed_event_id')::uuid, p_order_id);
    END IF;
    IF p_doc ? 'idempotency' THEN
        INSERT INTO api_idempotency (
            placement, user_id, scope, key, fingerprint, resource_id, created_at
        )
        SELECT r.placement, r.user_id, r.scope, r.key, r.fingerprint, r.resource_id, r.created_at
        FROM jsonb_populate_record(NULL::api_idempotency, p_doc -> 'idempotency') AS r;
    END IF;
    RETURN true;
END
$fn$

-- distribute_apply_order --
-- Citus: run `orderflow_apply_order` on the node of its order's shard, in the caller's
-- transaction too (force_delegation)
SELECT create_distributed_function(
    'orderflow_apply_order(uuid, jsonb)', 'p_order_id', colocate_with => 'orders',
    force_delegation => true)

-- apply_order --
-- Citus: one order's document written on its shard's node (`orderflow_apply_order`)
SELECT orderflow_apply_order(%(order_id)s::uuid, %(doc)s::jsonb) AS applied

-- number_events --
-- Citus, on the coordinator before an order's write: its events' feed numbers, taken from the
-- coordinator's sequence while the transaction holds its id and the writers' shared advisory
-- lock (as `apply_changes` does: the relay's horizon waits for these transactions,
-- `feed_horizon`); and the executors woken if the write makes a step due now (`announce`:
-- sent at commit from the coordinator, where they listen)
SELECT
    pg_current_xact_id()::text AS xact,
    pg_advisory_xact_lock_shared(784215312)::text AS tagged,
    ARRAY(SELECT nextval(pg_get_serial_sequence('outbox', 'seq'))
          FROM generate_series(1, %(events)s::integer)) AS seqs,
    CASE WHEN %(announce)s::boolean THEN pg_notify('orderflow_steps', '')::text END AS sent

-- keep_on_coordinator --
-- Citus: a table replicated by an earlier `migrate --distribute` made a plain table of the
-- coordinator again (`outbox_feed`: the relay's mark then commits on the coordinator alone)
SELECT undistribute_table(%(table)s::regclass)

-- insert_idempotency --
-- Citus: an idempotency record kept on another shard than its order's (a create whose order
-- id was not taken from its key), written beside `orderflow_apply_order` in its transaction
INSERT INTO api_idempotency (placement, user_id, scope, key, fingerprint, resource_id, created_at)
SELECT r.placement, r.user_id, r.scope, r.key, r.fingerprint, r.resource_id, r.created_at
FROM jsonb_populate_record(NULL::api_idempotency, %(record)s::jsonb) AS r
