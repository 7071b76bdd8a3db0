-- A step is always found through its order: the aggregate's reads and locks take an order's
-- steps by `order_id`, a write names the order and the step's `seq`, a claim returns both, a
-- lease renewal knows its order. The primary key on `step_id` was only another way to the same
-- rows, and each step row version that is not HOT (the claim and the result change `status`,
-- which the claim's partial indexes read) took an entry in it: ~8 index inserts and ~0.66 KB
-- of WAL per shipped order in `bench.worker_only`. The unique (order_id, seq) becomes the
-- primary key (a table in a logical-replication publication needs one for its updates);
-- `step_id` stays a column, unique by construction (a version 7 uuid), and what points at a
-- step (attempts, refunds, audit entries) keeps naming it by that id.
ALTER TABLE workflow_steps DROP CONSTRAINT workflow_steps_pkey;
-- The unique index becomes the key as it is (renamed workflow_steps_pkey), no rebuild.
ALTER TABLE workflow_steps
    ADD CONSTRAINT workflow_steps_pkey PRIMARY KEY USING INDEX workflow_steps_order_seq_key;
