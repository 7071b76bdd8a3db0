-- A step's latest attempt, under way or ended, lives on its step row (`latest_*`); only the
-- attempts before it are rows of `finished_attempts`, each moved there by the write that
-- starts the next attempt. Most steps run once: their one attempt ends in the update that
-- records the step's result, which writes the step row anyway, so it costs that row version
-- ~20 bytes instead of a row and an index entry of its own (~0.6 KB of WAL per order, three
-- inserts fewer). A retried step's earlier attempts are written once each, as before.
-- `step_attempts` still shows every attempt.
--
-- The columns of the attempt under way (0021) are renamed, not copied: a rename only changes
-- the catalogue. Processes of an earlier release must be stopped before this runs (their
-- statements name the old columns).

ALTER TABLE workflow_steps RENAME COLUMN open_attempt TO latest_attempt;
ALTER TABLE workflow_steps RENAME COLUMN open_started_at TO latest_started_at;
ALTER TABLE workflow_steps RENAME COLUMN open_worker TO latest_worker;
ALTER TABLE workflow_steps
    ADD COLUMN latest_finished_at timestamp with time zone,
    ADD COLUMN latest_outcome text,
    ADD COLUMN latest_error text;

ALTER TABLE workflow_steps DROP CONSTRAINT workflow_steps_open_attempt_whole;
ALTER TABLE workflow_steps ADD CONSTRAINT workflow_steps_latest_attempt_whole CHECK (
    (latest_attempt IS NULL) = (latest_started_at IS NULL)
    AND (latest_attempt IS NULL) = (latest_worker IS NULL)
    AND (latest_attempt IS NOT NULL OR latest_outcome IS NULL)
    AND (latest_outcome IS NOT NULL OR (latest_finished_at IS NULL AND latest_error IS NULL))
);

-- Each step with no attempt under way takes its last ended attempt onto its row. A step with
-- one under way keeps it: it is the latest (starting an attempt closes every earlier one).
WITH last AS (
    SELECT DISTINCT ON (a.step_id) a.*
    FROM finished_attempts AS a
    ORDER BY a.step_id, a.attempt DESC
), moved AS (
    UPDATE workflow_steps AS s SET
        latest_attempt = last.attempt, latest_started_at = last.started_at,
        latest_worker = last.worker, latest_finished_at = last.finished_at,
        latest_outcome = last.outcome, latest_error = last.error
    FROM last
    WHERE s.step_id = last.step_id AND s.latest_attempt IS NULL
    RETURNING s.step_id, s.latest_attempt
)
DELETE FROM finished_attempts AS a
USING moved
WHERE a.step_id = moved.step_id AND a.attempt = moved.latest_attempt;

-- Every attempt, as before: the earlier ones and each step's latest.
CREATE OR REPLACE VIEW step_attempts AS
SELECT step_id, attempt, started_at, worker, finished_at, outcome, error
FROM finished_attempts
UNION ALL
SELECT step_id, latest_attempt, latest_started_at, latest_worker, latest_finished_at,
    latest_outcome, latest_error
FROM workflow_steps
WHERE latest_attempt IS NOT NULL;
