-- The event feed is numbered when the relay publishes, in publication order: outbox `seq`
-- values are handed out before commit, so a reader paging by `seq` could skip an event that
-- committed late. `feed_seq` is assigned under an advisory lock, so it only ever grows.
CREATE SEQUENCE outbox_feed_seq;
ALTER TABLE outbox ADD COLUMN feed_seq bigint UNIQUE;
