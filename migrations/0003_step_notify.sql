-- Wake idle executors (LISTEN orderflow_steps) when a step becomes due now, so a new step
-- starts within milliseconds instead of at the next poll. Notifications with the same payload
-- in one transaction are folded into one by PostgreSQL; polling remains the safety net.
CREATE FUNCTION orderflow_notify_step() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('orderflow_steps', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER workflow_steps_notify
    AFTER INSERT OR UPDATE OF status ON workflow_steps
    FOR EACH ROW WHEN (NEW.status = 'pending')
    EXECUTE FUNCTION orderflow_notify_step();
