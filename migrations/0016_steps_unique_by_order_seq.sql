-- A step's idempotency key is `<order_id>:<kind>:<seq>` and its seq is unique within its order,
-- so a unique (order_id, seq) protects what the unique idempotency key did, on the index the
-- store already keeps for reading an order's steps. The key's own unique index was never read
-- (no query looks a step up by its key) but took a ~60-byte entry for every step row version
-- that is not HOT: 8 index inserts and 1.7-2.4 KB of WAL per order in `bench.worker_only`.
CREATE UNIQUE INDEX workflow_steps_order_seq_key ON workflow_steps (order_id, seq);
DROP INDEX workflow_steps_order_idx;
ALTER TABLE workflow_steps DROP CONSTRAINT workflow_steps_idempotency_key_key;
