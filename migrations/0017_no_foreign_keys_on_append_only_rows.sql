-- History rows and step attempts are only ever written by `apply_changes`, in the same
-- statement as the order (or step) they belong to, from one document the core built from that
-- aggregate; nothing deletes orders or steps. Their foreign keys therefore never caught
-- anything, but each inserted row ran a check that takes a KEY SHARE lock on the parent row
-- (a WAL record when the statement just wrote that row). Steps and refunds keep theirs.
ALTER TABLE order_history DROP CONSTRAINT order_history_order_id_fkey;
ALTER TABLE step_attempts DROP CONSTRAINT step_attempts_step_id_fkey;
