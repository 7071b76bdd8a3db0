-- The order row's columns in the order they change: what never changes first, what changes
-- with every write of the order (its state, reason, time, event number and version) last.
-- An update that stays on its page (HOT, as an order's updates are) logs only the bytes
-- between the first and the last ones that differ from the row before; with `version`,
-- `state` and the reservation's and payment's columns spread through the row, that span was
-- most of it. PostgreSQL cannot move a column, so the table is rebuilt: this migration takes
-- an exclusive lock on `orders` for as long as the copy lasts (seconds per million orders;
-- plan it like any table rewrite), and the new table has no planner statistics until
-- autovacuum analyzes it (or run `ANALYZE orders` after migrating a large table). Names,
-- types, defaults, constraints and indexes are as before, and no query depends on the
-- position of a column.
--
-- The steps' foreign key to their order is not put back. A step is inserted only by
-- `apply_changes`, in its order's own document, beside that order's insert or under its
-- version fence or row lock, and nothing deletes an order, so the key never caught anything
-- (as with history and attempts, 0017); each step inserted ran its check, an index probe and
-- a KEY SHARE lock on the order's row: a WAL record when the statement had just written that
-- row (0.9 per order). Re-adding it here would also have read every step to validate it.
-- Refunds keep theirs.

ALTER TABLE refunds DROP CONSTRAINT refunds_order_id_fkey;
ALTER TABLE workflow_steps DROP CONSTRAINT workflow_steps_order_id_fkey;
ALTER TABLE orders RENAME TO orders_before_0024;

CREATE TABLE orders (
    -- never changed after creation
    order_id uuid NOT NULL,
    created_at timestamp with time zone NOT NULL,
    total_minor bigint NOT NULL,
    process_version integer NOT NULL,
    customer_id text NOT NULL,
    currency text NOT NULL,
    items jsonb NOT NULL,
    trace_parent text,
    -- changed by a few writes of the order
    attention_reason text,
    attention_since timestamp with time zone,
    reservation_id text,
    reservation_status text DEFAULT 'none'::text NOT NULL,
    reserved_at timestamp with time zone,
    reservation_expires_at timestamp with time zone,
    reservation_expired boolean DEFAULT false NOT NULL,
    payment_status text DEFAULT 'none'::text NOT NULL,
    payment_reference text,
    -- changed by every write of the order
    version bigint DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    event_seq integer DEFAULT 0 NOT NULL,
    state text NOT NULL,
    state_reason text
) WITH (fillfactor = 80);

INSERT INTO orders (
    order_id, created_at, total_minor, process_version, customer_id, currency, items,
    trace_parent, attention_reason, attention_since, reservation_id, reservation_status,
    reserved_at, reservation_expires_at, reservation_expired, payment_status,
    payment_reference, version, updated_at, event_seq, state, state_reason
)
SELECT
    order_id, created_at, total_minor, process_version, customer_id, currency, items,
    trace_parent, attention_reason, attention_since, reservation_id, reservation_status,
    reserved_at, reservation_expires_at, reservation_expired, payment_status,
    payment_reference, version, updated_at, event_seq, state, state_reason
FROM orders_before_0024;

DROP TABLE orders_before_0024;

ALTER TABLE orders ADD CONSTRAINT orders_pkey PRIMARY KEY (order_id);
ALTER TABLE orders ADD CONSTRAINT orders_total_minor_check CHECK (total_minor >= 0);
ALTER TABLE orders ADD CONSTRAINT orders_attention_stamped
    CHECK ((attention_reason IS NULL) = (attention_since IS NULL));
CREATE INDEX orders_customer_newest_idx ON orders (customer_id, created_at DESC, order_id DESC);
CREATE INDEX orders_newest_idx ON orders (created_at DESC, order_id DESC);
CREATE INDEX orders_waiting_idx ON orders (attention_since DESC, order_id DESC)
    WHERE attention_reason IS NOT NULL;
ALTER TABLE refunds ADD CONSTRAINT refunds_order_id_fkey
    FOREIGN KEY (order_id) REFERENCES orders (order_id);
