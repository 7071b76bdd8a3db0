-- Wake executors only for a step that is due the moment it appears. 0003 notified on every
-- pending step, timers included (the reservation's expiry, due in 15 minutes, is inserted
-- pending), and each such wake-up cost an empty claim. An inserted step is due now when it is
-- due at its own creation time (both come from the application's clock, never the server's);
-- a step put back to pending (an operator's retry) is always announced. Steps due later are
-- found by the executors' poll.
DROP TRIGGER workflow_steps_notify ON workflow_steps;

CREATE TRIGGER workflow_steps_notify_due_insert
    AFTER INSERT ON workflow_steps
    FOR EACH ROW WHEN (NEW.status = 'pending' AND NEW.next_attempt_at <= NEW.created_at)
    EXECUTE FUNCTION orderflow_notify_step();

CREATE TRIGGER workflow_steps_notify_back_to_pending
    AFTER UPDATE OF status ON workflow_steps
    FOR EACH ROW WHEN (NEW.status = 'pending' AND OLD.status IS DISTINCT FROM 'pending')
    EXECUTE FUNCTION orderflow_notify_step();
