-- An event's payload is stored without its `order_id` when the id was there and is the row's
-- own (`rows.event_doc`, ~50 bytes of each event row); this flag says so, and the queries that
-- read events put the id back only where it was taken out, so every event reads exactly as
-- it was emitted (one that never carried it gains nothing). Rows written before keep their
-- payload whole and the flag false. One byte per row, which the row's alignment on the page
-- absorbs.

ALTER TABLE outbox ADD COLUMN order_id_left_out boolean NOT NULL DEFAULT false;
