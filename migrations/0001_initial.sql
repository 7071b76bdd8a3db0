-- 0001_initial: the whole schema of process version 1.
-- Never edit this file once applied anywhere: add 0002_….sql instead (the runner refuses a
-- changed checksum).

CREATE TABLE orders (
    order_id               uuid PRIMARY KEY,
    customer_id            text        NOT NULL,
    items                  jsonb       NOT NULL,  -- [{sku, quantity, unit_price_minor}]
    total_minor            bigint      NOT NULL CHECK (total_minor >= 0),
    currency               text        NOT NULL,
    process_version        integer     NOT NULL,
    state                  text        NOT NULL,
    created_at             timestamptz NOT NULL,
    updated_at             timestamptz NOT NULL,
    event_seq              integer     NOT NULL DEFAULT 0,
    state_reason           text,
    reservation_id         text,
    reservation_status     text        NOT NULL DEFAULT 'none',
    reserved_at            timestamptz,
    reservation_expires_at timestamptz,
    reservation_expired    boolean     NOT NULL DEFAULT false,
    payment_status         text        NOT NULL DEFAULT 'none',
    payment_reference      text
);
-- Keyset paging newest first, for everyone and per customer.
CREATE INDEX orders_newest_idx ON orders (created_at DESC, order_id DESC);
CREATE INDEX orders_customer_newest_idx ON orders (customer_id, created_at DESC, order_id DESC);
CREATE INDEX orders_state_newest_idx ON orders (state, created_at DESC, order_id DESC);

CREATE TABLE workflow_steps (
    step_id          uuid PRIMARY KEY,
    order_id         uuid        NOT NULL REFERENCES orders (order_id),
    kind             text        NOT NULL,
    seq              integer     NOT NULL,
    status           text        NOT NULL,
    idempotency_key  text        NOT NULL UNIQUE,
    created_at       timestamptz NOT NULL,
    attempt          integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL,
    armed_attempt    integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz,
    lease_owner      text,
    lease_expires_at timestamptz,
    last_error       text,
    result           jsonb       NOT NULL DEFAULT '{}',
    refund_id        uuid
) WITH (fillfactor = 80);  -- room for HOT updates: claims and renewals rewrite rows in place
CREATE INDEX workflow_steps_order_idx ON workflow_steps (order_id, seq);
-- The claim reads only these two partial indexes, so their size is the number of live steps,
-- however many finished steps pile up in the table.
CREATE INDEX workflow_steps_due_idx ON workflow_steps (next_attempt_at)
    WHERE status IN ('pending', 'retry_scheduled');
CREATE INDEX workflow_steps_lease_idx ON workflow_steps (lease_expires_at)
    WHERE status = 'running';

CREATE TABLE step_attempts (
    step_id     uuid        NOT NULL REFERENCES workflow_steps (step_id),
    attempt     integer     NOT NULL,
    started_at  timestamptz NOT NULL,
    worker      text        NOT NULL,
    finished_at timestamptz,
    outcome     text,
    error       text,
    PRIMARY KEY (step_id, attempt)
);

CREATE TABLE refunds (
    refund_id        uuid PRIMARY KEY,
    order_id         uuid        NOT NULL REFERENCES orders (order_id),
    amount_minor     bigint      NOT NULL CHECK (amount_minor > 0),
    reason           text        NOT NULL,
    status           text        NOT NULL,
    requested_by     text        NOT NULL,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    step_id          uuid        NOT NULL,
    refund_reference text,
    last_error       text
);
CREATE INDEX refunds_order_idx ON refunds (order_id, created_at);

CREATE TABLE order_history (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id   uuid        NOT NULL REFERENCES orders (order_id),
    seq        integer     NOT NULL,
    from_state text,
    to_state   text        NOT NULL,
    at         timestamptz NOT NULL,
    actor      text        NOT NULL,
    reason     text        NOT NULL
);
CREATE INDEX order_history_order_idx ON order_history (order_id, id);

CREATE TABLE outbox (
    seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id     uuid        NOT NULL UNIQUE,
    order_id     uuid        NOT NULL,
    type         text        NOT NULL,
    payload      jsonb       NOT NULL,
    created_at   timestamptz NOT NULL,
    published_at timestamptz
);
-- The relay reads only what is not yet published.
CREATE INDEX outbox_unpublished_idx ON outbox (seq) WHERE published_at IS NULL;

CREATE TABLE processed_events (
    event_id uuid PRIMARY KEY,
    order_id uuid NOT NULL
);

CREATE TABLE audit_log (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id uuid        NOT NULL,
    at       timestamptz NOT NULL,
    actor    text        NOT NULL,
    action   text        NOT NULL,
    outcome  text        NOT NULL,
    step_id  uuid,
    details  jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_order_idx ON audit_log (order_id, id);

CREATE TABLE api_idempotency (
    user_id     text        NOT NULL,
    scope       text        NOT NULL,
    key         text        NOT NULL,
    fingerprint text        NOT NULL,
    resource_id uuid        NOT NULL,
    created_at  timestamptz NOT NULL,
    CONSTRAINT api_idempotency_pkey PRIMARY KEY (user_id, scope, key)
);

CREATE TABLE users (
    user_id    text PRIMARY KEY,
    role       text NOT NULL,
    token_hash text NOT NULL UNIQUE
);
