-- The attention queue: why an order waits for a person and since when, stamped by the decision
-- that made it wait (NULL when it does not wait). The partial index holds only waiting orders,
-- newest waiting first, so the queue costs the number of waiting orders, not of all orders.
ALTER TABLE orders
    ADD COLUMN attention_reason text,
    ADD COLUMN attention_since  timestamptz;

ALTER TABLE orders ADD CONSTRAINT orders_attention_stamped
    CHECK ((attention_reason IS NULL) = (attention_since IS NULL));

CREATE INDEX orders_waiting_idx ON orders (attention_since DESC, order_id DESC)
    WHERE attention_reason IS NOT NULL;

-- Orders already waiting when this runs: the same reading of the lifecycle as the code's
-- (`OrderAggregate.attention_reason`), since their last change. Any later decision on an order
-- re-stamps it from the code, so this is only the starting point.
WITH mainline AS (
    SELECT DISTINCT ON (s.order_id) s.order_id, s.status
    FROM workflow_steps AS s
    WHERE s.kind IN ('reserve', 'charge', 'reconcile_payment', 'ship', 'release_reservation')
      AND s.status <> 'cancelled'
    ORDER BY s.order_id, s.seq DESC
), reconcile AS (
    SELECT DISTINCT ON (s.order_id) s.order_id, s.status
    FROM workflow_steps AS s
    WHERE s.kind = 'reconcile_payment'
    ORDER BY s.order_id, s.seq DESC
), waiting AS (
    SELECT o.order_id,
        CASE
            WHEN o.state = 'shipping_failed' THEN 'shipping_failed'
            WHEN o.state = 'payment_unknown' THEN
                CASE
                    WHEN EXISTS (
                        SELECT 1 FROM workflow_steps AS s
                        WHERE s.order_id = o.order_id
                          AND s.kind IN ('reconcile_payment', 'charge')
                          AND s.status IN ('pending', 'retry_scheduled', 'running')
                    ) THEN NULL
                    WHEN r.status IN ('failed', 'blocked') THEN 'reconcile_gave_up'
                    ELSE 'expired_while_unknown'
                END
            WHEN m.status = 'blocked' THEN 'blocked'
            WHEN m.status = 'failed' THEN 'retries_exhausted'
        END AS reason
    FROM orders AS o
    LEFT JOIN mainline AS m ON m.order_id = o.order_id
    LEFT JOIN reconcile AS r ON r.order_id = o.order_id
    WHERE o.state NOT IN ('shipped', 'reservation_failed', 'payment_failed', 'cancelled', 'refunded')
)
UPDATE orders AS o
SET attention_reason = w.reason, attention_since = o.updated_at
FROM waiting AS w
WHERE w.order_id = o.order_id AND w.reason IS NOT NULL;
