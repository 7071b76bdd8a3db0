-- A step's idempotency key is `<order_id>:<kind>:<seq>` (`ids.step_key`), which its row holds
-- anyway. Stored, it was ~50 of the row's ~230 bytes, written again by every row version: the
-- insert and each update (claim, result) of every step. A row now leaves it NULL when it is
-- the derived one; the store derives it again when it reads the row. Rows written before keep
-- the key they hold, which is the same value.

ALTER TABLE workflow_steps ALTER COLUMN idempotency_key DROP NOT NULL;

COMMENT ON COLUMN workflow_steps.idempotency_key IS
    'NULL: the key is order_id:kind:seq (derived when read); otherwise the key itself';
