-- A version per order, raised by every write of the order through `apply_changes`. A worker
-- that committed an order keeps the aggregate it wrote; its next change of that order is
-- decided on that copy and written only if, under the statement's row locks, the version and
-- every step's (attempt, status) are still what the copy says (claims change those), so the
-- locking read before it is saved. On a mismatch nothing of that order is written and the
-- store falls back to the locking read.
ALTER TABLE orders ADD COLUMN version bigint NOT NULL DEFAULT 0;
