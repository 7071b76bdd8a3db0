-- The audit log partitioned by month on `at` (docs/retention.md, "The audit log by month"): a
-- month past the audit retention is removed by dropping its partition, a few WAL records,
-- instead of a DELETE that writes some 530 bytes of WAL per entry and leaves the space inside
-- the table.
--
-- The key gains the partition column, `(order_id, id, at)`: still led by the order, so an
-- order's audit log is read by the key in each partition, and Citus distributes the table (and
-- each partition) by `order_id` as before. The DEFAULT partition takes what no month covers: the
-- entries written before the pruner created their month's partition, and the entries of a
-- dropped month whose order still exists (put back there, kept with their order).
--
-- The months of the existing entries get their partitions here (from the data: a migration has
-- no clock); the pruner creates the coming months' on each pass (orderflow_pg/prune.py).
ALTER TABLE audit_log RENAME TO audit_log_unpartitioned;
ALTER TABLE audit_log_unpartitioned RENAME CONSTRAINT audit_log_pkey TO audit_log_unpartitioned_pkey;
ALTER INDEX audit_log_at_brin RENAME TO audit_log_unpartitioned_at_brin;
ALTER SEQUENCE audit_log_id_seq RENAME TO audit_log_unpartitioned_id_seq;

CREATE TABLE audit_log (
    id       bigint GENERATED ALWAYS AS IDENTITY,
    order_id uuid        NOT NULL,
    at       timestamptz NOT NULL,
    actor    text        NOT NULL,
    action   text        NOT NULL,
    outcome  text        NOT NULL,
    step_id  uuid,
    details  jsonb       NOT NULL DEFAULT '{}'
) PARTITION BY RANGE (at);
ALTER TABLE audit_log ADD CONSTRAINT audit_log_pkey PRIMARY KEY (order_id, id, at);
CREATE INDEX audit_log_at_brin ON audit_log USING brin (at);
CREATE TABLE audit_log_default PARTITION OF audit_log DEFAULT;

-- One partition per month (UTC) holding existing entries, named audit_log_YYYYMM as the
-- pruner names them.
DO $$
DECLARE
    month timestamptz;
BEGIN
    FOR month IN
        SELECT DISTINCT date_trunc('month', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
        FROM audit_log_unpartitioned ORDER BY 1
    LOOP
        EXECUTE format(
            'CREATE TABLE %I PARTITION OF audit_log FOR VALUES FROM (%L) TO (%L)',
            'audit_log_' || to_char(month AT TIME ZONE 'UTC', 'YYYYMM'),
            month,
            (month AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC');
    END LOOP;
END
$$;

INSERT INTO audit_log (id, order_id, at, actor, action, outcome, step_id, details)
OVERRIDING SYSTEM VALUE
SELECT id, order_id, at, actor, action, outcome, step_id, details FROM audit_log_unpartitioned;

-- Numbering goes on where it stopped.
SELECT setval(pg_get_serial_sequence('audit_log', 'id'), max(id))
FROM audit_log_unpartitioned HAVING max(id) IS NOT NULL;

DROP TABLE audit_log_unpartitioned;
