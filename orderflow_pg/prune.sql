-- The pruner's SQL (orderflow_pg/prune.py; docs/retention.md). Named blocks as in queries.sql:
-- `-- name --`, one line of description, the statement; parameters always bound.

-- prune_lock --
-- One pruner at a time across every process: a session-level advisory lock, taken or not at once
SELECT pg_try_advisory_lock(%(lock_key)s) AS locked

-- prune_unlock --
-- Let the next pruner in
SELECT pg_advisory_unlock(%(lock_key)s) AS unlocked

-- feed_position --
-- How far the feed is published, and its floor (events at or below it may be gone)
SELECT published_through, pruned_through FROM outbox_feed

-- feed_floor --
-- The feed's floor alone (read after a feed page, to tell a cursor that fell behind it)
SELECT pruned_through FROM outbox_feed

-- feed_next --
-- The next published events above the floor, oldest first (the pass raises the floor through
-- those created before the cutoff, stopping at the first one inside the window)
SELECT seq, created_at FROM outbox
WHERE seq > %(floor)s AND seq <= %(published)s
ORDER BY seq LIMIT %(limit)s

-- feed_prune --
-- Raise the floor through `through` and remove the events at or below it that no kept order
-- needs: every event that is not a transition, and the transitions of orders already removed
-- (a kept order's transitions are its history; they go with it)
WITH raised AS (
    UPDATE outbox_feed SET pruned_through = %(through)s WHERE pruned_through < %(through)s
    RETURNING pruned_through
)
DELETE FROM outbox AS e
WHERE e.seq > %(floor)s AND e.seq <= %(through)s
  AND EXISTS (SELECT FROM raised)
  AND (NOT e.transition OR NOT EXISTS (SELECT FROM orders AS o WHERE o.order_id = e.order_id))

-- feed_count --
-- Dry run: how many events the feed prune would remove (up to the floor it would set)
SELECT count(*) AS n FROM outbox AS e
WHERE e.seq > %(floor)s AND e.seq <= %(through)s
  AND (NOT e.transition OR NOT EXISTS (SELECT FROM orders AS o WHERE o.order_id = e.order_id))

-- finished_orders --
-- The next finished orders created and last changed before the cutoff, oldest first, after a
-- keyset position: terminal, not waiting for a person, no step left to run, no open refund,
-- every event published. Locked (SKIP LOCKED: a writer holding one is left for the next pass)
-- so nothing changes them between the archive and the delete; on Citus, which takes row locks
-- in single-shard statements only, the lock clause is left out and each candidate is locked by
-- `lock_order`, then confirmed by this statement again limited to `only` (NULL: any order).
-- Read through orders_newest_idx.
SELECT o.order_id, o.created_at
FROM orders AS o
WHERE (o.created_at, o.order_id) > (%(after_at)s, %(after_id)s)
  AND (%(only)s::uuid[] IS NULL OR o.order_id = ANY(%(only)s::uuid[]))
  AND o.created_at < %(cutoff)s
  AND o.updated_at < %(cutoff)s
  AND o.state IN ('shipped', 'reservation_failed', 'payment_failed', 'cancelled', 'refunded')
  AND o.attention_reason IS NULL
  AND NOT EXISTS (
      SELECT FROM workflow_steps AS s
      WHERE s.order_id = o.order_id AND s.status IN ('pending', 'running', 'retry_scheduled'))
  AND NOT EXISTS (
      SELECT FROM refunds AS r
      WHERE r.order_id = o.order_id AND r.status IN ('requested', 'processing', 'blocked'))
  AND NOT EXISTS (
      SELECT FROM outbox AS e
      WHERE e.order_id = o.order_id
        AND e.seq > (SELECT published_through FROM outbox_feed))
ORDER BY o.created_at, o.order_id
LIMIT %(limit)s
{lock}

-- lock_order --
-- One candidate order locked in a statement of its own shard (Citus); no row when a writer
-- holds it (left for the next pass)
SELECT o.order_id FROM orders AS o WHERE o.order_id = %(order_id)s FOR UPDATE SKIP LOCKED

-- archive_documents --
-- Each order as its archive line: the order (with its items), steps (each with its earlier
-- attempts; the latest is on the step),
-- refunds, history and audit entries, and when it was archived
SELECT o.order_id, jsonb_build_object(
    'archived_at', %(now)s::timestamptz,
    'order', to_jsonb(o),
    -- a step's earlier attempts by the attempts' key; its latest is on its own row (latest_*),
    -- as in the store's aggregate (the step_attempts view, read by step_id alone, would scan
    -- every step for each: 60 s on 60,000 steps)
    'steps', (SELECT coalesce(jsonb_agg(
        to_jsonb(s) || jsonb_build_object('attempts', (
            SELECT coalesce(jsonb_agg(to_jsonb(a) ORDER BY a.attempt), '[]')
            FROM finished_attempts AS a
            WHERE a.order_id = s.order_id AND a.step_id = s.step_id))
        ORDER BY s.seq), '[]') FROM workflow_steps AS s WHERE s.order_id = o.order_id),
    'refunds', (SELECT coalesce(jsonb_agg(to_jsonb(r) ORDER BY r.created_at, r.refund_id), '[]')
        FROM refunds AS r WHERE r.order_id = o.order_id),
    'history', (SELECT coalesce(jsonb_agg(to_jsonb(h) ORDER BY h.seq), '[]')
        FROM order_history AS h WHERE h.order_id = o.order_id),
    'audit', (SELECT coalesce(jsonb_agg(to_jsonb(a) ORDER BY a.id), '[]')
        FROM audit_log AS a WHERE a.order_id = o.order_id)
)::text AS doc
FROM orders AS o
WHERE o.order_id = ANY(%(order_ids)s::uuid[])
ORDER BY o.created_at, o.order_id

-- delete_orders --
-- Remove archived orders with what belongs to them, by order id: attempts, steps, refunds,
-- processed event ids, and their events at or below the feed's floor (any above it stay until
-- the feed prune passes them). The audit entries stay (the audit retention removes them).
WITH attempts AS (
    DELETE FROM finished_attempts WHERE order_id = ANY(%(order_ids)s::uuid[]) RETURNING 1
), steps AS (
    DELETE FROM workflow_steps WHERE order_id = ANY(%(order_ids)s::uuid[]) RETURNING 1
), refunds AS (
    DELETE FROM refunds WHERE order_id = ANY(%(order_ids)s::uuid[]) RETURNING 1
), processed AS (
    DELETE FROM processed_events WHERE order_id = ANY(%(order_ids)s::uuid[]) RETURNING 1
), events AS (
    DELETE FROM outbox
    WHERE order_id = ANY(%(order_ids)s::uuid[])
      AND seq <= (SELECT pruned_through FROM outbox_feed)
    RETURNING 1
)
SELECT
    (SELECT count(*) FROM attempts) AS attempts,
    (SELECT count(*) FROM steps) AS steps,
    (SELECT count(*) FROM refunds) AS refunds,
    (SELECT count(*) FROM processed) AS processed_events,
    (SELECT count(*) FROM events) AS events

-- delete_order_rows --
-- The orders themselves, after `delete_orders` (their refunds' foreign key)
DELETE FROM orders WHERE order_id = ANY(%(order_ids)s::uuid[])

-- idempotency_prune --
-- Forget a batch of idempotency keys recorded before the cutoff (BRIN on created_at), by their
-- key (a row's ctid names it in one table only: on Citus each shard has its own)
DELETE FROM api_idempotency AS i
WHERE i.created_at < %(cutoff)s
  AND (i.placement, i.user_id, i.scope, i.key) IN (
      SELECT placement, user_id, scope, key FROM api_idempotency
      WHERE created_at < %(cutoff)s LIMIT %(limit)s)

-- idempotency_count --
-- Dry run: how many idempotency keys are older than the cutoff
SELECT count(*) AS n FROM api_idempotency WHERE created_at < %(cutoff)s

-- audit_prune --
-- Remove a batch of audit entries of the DEFAULT partition written before the cutoff whose
-- order is gone (a kept order, however old, keeps its whole audit log). The months' partitions
-- are dropped whole instead (`audit_month_*`).
DELETE FROM audit_log_default AS a
WHERE a.at < %(cutoff)s
  AND (a.order_id, a.id) IN (
      SELECT d.order_id, d.id FROM audit_log_default AS d
      WHERE d.at < %(cutoff)s
        AND NOT EXISTS (SELECT FROM orders AS o WHERE o.order_id = d.order_id)
      LIMIT %(limit)s)

-- audit_count --
-- Dry run: how many audit entries of the DEFAULT partition the audit prune would remove
SELECT count(*) AS n FROM audit_log_default AS a
WHERE a.at < %(cutoff)s AND NOT EXISTS (SELECT FROM orders AS o WHERE o.order_id = a.order_id)

-- audit_months --
-- The audit log's monthly partitions (audit_log_YYYYMM, UTC months), by name
SELECT c.relname AS name
FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = 'audit_log'::regclass AND c.relname ~ '^audit_log_[0-9]{6}$'
ORDER BY c.relname

-- audit_default_has --
-- Whether the DEFAULT partition holds entries of a month (written before its partition existed)
-- (a row or none: on Citus, EXISTS over a distributed table is not planned in a target list)
SELECT 1 AS found FROM audit_log_default WHERE at >= %(lo)s AND at < %(hi)s LIMIT 1

-- audit_month_create --
-- A month's partition (composed: the name and bounds are identifiers and literals)
CREATE TABLE {month} PARTITION OF audit_log FOR VALUES FROM ({lo}) TO ({hi})

-- audit_stash --
-- A transaction's scratch table for entries taken out of one partition and put back through
-- the parent once the partitions changed
CREATE TEMP TABLE audit_stash (LIKE audit_log) ON COMMIT DROP

-- audit_stash_default --
-- Take a month's entries out of the DEFAULT partition before its own partition is created
WITH moved AS (
    DELETE FROM audit_log_default WHERE at >= %(lo)s AND at < %(hi)s RETURNING *
)
INSERT INTO audit_stash SELECT * FROM moved

-- audit_stash_kept --
-- The entries of a month to drop whose order still exists. An order's entries are written at
-- or after its creation, so only orders created before the month's end (a day's margin for
-- clocks apart) are looked up, through orders_newest_idx, each by the key of the month
INSERT INTO audit_stash
SELECT a.* FROM orders AS o JOIN {month} AS a ON a.order_id = o.order_id
WHERE o.created_at < %(hi)s::timestamptz + interval '1 day'

-- audit_unstash --
-- Put the stashed entries back through the parent, with their ids: each lands in the
-- partition that now covers its time (DEFAULT for a dropped month's)
INSERT INTO audit_log (id, order_id, at, actor, action, outcome, step_id, details)
OVERRIDING SYSTEM VALUE
SELECT id, order_id, at, actor, action, outcome, step_id, details FROM audit_stash

-- audit_month_size --
-- How many entries a month's partition holds (read once, before it is dropped)
SELECT count(*) AS n FROM {month}

-- audit_month_kept --
-- Dry run: how many entries of a month to drop would be kept (their order exists)
SELECT count(*) AS n FROM orders AS o JOIN {month} AS a ON a.order_id = o.order_id
WHERE o.created_at < %(hi)s::timestamptz + interval '1 day'

-- audit_month_detach --
-- Detach a month from the audit log (a short ACCESS EXCLUSIVE lock on the parent, waited for
-- at most the transaction's lock_timeout)
ALTER TABLE audit_log DETACH PARTITION {month}

-- audit_month_drop --
-- The detached month's files, returned at once
DROP TABLE {month}

-- partition_timeouts --
-- A partition change: its statements may read a whole month; its locks are waited for briefly
-- (a pass that cannot have them leaves the month to the next pass)
SELECT set_config('statement_timeout', %(statement_ms)s, true),
       set_config('lock_timeout', %(lock_ms)s, true)
