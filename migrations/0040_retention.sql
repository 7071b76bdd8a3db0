-- Retention (docs/retention.md): what `orderflow prune` needs to find old rows cheaply and to
-- keep the feed's promise.
--
-- `outbox_feed.pruned_through`: the feed's floor. Events with seq at or below it may have been
-- removed, so a feed cursor below it is answered 410 `cursor_expired` instead of a silent gap.
ALTER TABLE outbox_feed ADD COLUMN pruned_through bigint NOT NULL DEFAULT 0;

-- The time-ordered kinds are appended in time order, so a BRIN index (a few pages, one summary
-- per 128 heap pages, nothing written per row until vacuum summarises a range) finds their old
-- rows without a sequential scan and without a B-tree insert on the hot path.
CREATE INDEX api_idempotency_created_brin ON api_idempotency USING brin (created_at);
CREATE INDEX audit_log_at_brin ON audit_log USING brin (at);
