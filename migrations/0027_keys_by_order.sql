-- Every order-scoped table is keyed by its order: each primary and unique key starts with
-- `order_id`, so the tables can be distributed by `order_id` and co-located with `orders`
-- (`orderflow migrate --distribute`, docs/citus.md), and every row an order's statement writes
-- or reads lies on the order's shard. On a single server nothing changes for the hot
-- statements: they find rows by the same leading column they did (the order's), and the keys
-- that were only another way to the same rows (`outbox.seq`, `audit_log.id`) become plain
-- ordered indexes or the tail of the order's key.
--
-- outbox: the key is (order_id, order_seq) (the unique key it had, renamed); `seq`, the feed
-- number, keeps an index of its own for the feed's range reads, no longer unique (an identity
-- hands out each number once).
ALTER TABLE outbox DROP CONSTRAINT outbox_pkey;
ALTER TABLE outbox DROP CONSTRAINT outbox_order_seq_key;
ALTER TABLE outbox ADD CONSTRAINT outbox_pkey PRIMARY KEY (order_id, order_seq);
CREATE INDEX outbox_seq_idx ON outbox (seq);

-- audit_log: (order_id, id) was already its reading index; it becomes the key.
ALTER TABLE audit_log DROP CONSTRAINT audit_log_pkey;
DROP INDEX audit_log_order_idx;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_pkey PRIMARY KEY (order_id, id);

-- finished_attempts: carries its step's order (read and written with it).
ALTER TABLE finished_attempts ADD COLUMN order_id uuid;
UPDATE finished_attempts AS a SET order_id = s.order_id
FROM workflow_steps AS s WHERE s.step_id = a.step_id;
-- An attempt whose step is gone (none is ever deleted; kept for safety) keeps a key of its own.
UPDATE finished_attempts SET order_id = step_id WHERE order_id IS NULL;
ALTER TABLE finished_attempts ALTER COLUMN order_id SET NOT NULL;
ALTER TABLE finished_attempts DROP CONSTRAINT finished_attempts_pkey;
ALTER TABLE finished_attempts ADD CONSTRAINT finished_attempts_pkey
    PRIMARY KEY (order_id, step_id, attempt);

-- refunds: found through their order (`refunds_order_idx` stays for the aggregate's order).
ALTER TABLE refunds DROP CONSTRAINT refunds_pkey;
ALTER TABLE refunds ADD CONSTRAINT refunds_pkey PRIMARY KEY (order_id, refund_id);

-- processed_events: an event is checked for and marked on the order it changes.
ALTER TABLE processed_events DROP CONSTRAINT processed_events_pkey;
ALTER TABLE processed_events ADD CONSTRAINT processed_events_pkey PRIMARY KEY (order_id, event_id);

-- api_idempotency: each record carries its placement, a uuid computed from the record's own
-- key (orderflow_core.ids.idempotency_placement): the order a scope names (`refund:<order
-- id>`), else md5(user, scope, key) read as a uuid. The key starts with it, so a lookup by
-- (user, scope, key) computes the one place to look; on Citus the table is distributed by it,
-- co-located with `orders`, and a create there gives its order that same id, so the order and
-- its key are written on one shard (docs/citus.md).
ALTER TABLE api_idempotency ADD COLUMN placement uuid;
UPDATE api_idempotency SET placement = CASE
    WHEN scope ~ '^[a-z_]+:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
        THEN split_part(scope, ':', 2)::uuid
    ELSE md5(user_id || chr(31) || scope || chr(31) || key)::uuid
END;
ALTER TABLE api_idempotency ALTER COLUMN placement SET NOT NULL;
ALTER TABLE api_idempotency DROP CONSTRAINT api_idempotency_pkey;
ALTER TABLE api_idempotency ADD CONSTRAINT api_idempotency_pkey
    PRIMARY KEY (placement, user_id, scope, key);
