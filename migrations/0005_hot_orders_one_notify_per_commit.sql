-- Order updates become HOT (no index entries written): an order row is rewritten at every
-- transition, and `state` was the only volatile column in an index (orders_state_newest_idx),
-- so each transition wrote a new entry into all four indexes of the table. Listing by state
-- now walks the newest-first index and filters (fast when the state is common among recent
-- orders; see docs/postgres-store.md). fillfactor 80 leaves room on each page for the new
-- row versions (existing pages get it as they are rewritten).
DROP INDEX orders_state_newest_idx;
ALTER TABLE orders SET (fillfactor = 80);

-- One NOTIFY per committed statement instead of a trigger per row: `apply_changes` (every
-- write of steps but the claim, which never makes a step due) sends `NOTIFY orderflow_steps`
-- itself when one of its documents makes a step due now (inserted pending and due at its own
-- creation time, or put back to pending), once for all the orders of a group commit. The
-- trigger ran a PL/pgSQL function for each such row.
DROP TRIGGER workflow_steps_notify_due_insert ON workflow_steps;
DROP TRIGGER workflow_steps_notify_back_to_pending ON workflow_steps;
DROP FUNCTION orderflow_notify_step();
