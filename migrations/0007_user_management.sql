-- 0007_user_management: more than the two seeded users. A user can be disabled (its token then
-- authenticates nobody), and `orderflow user list` shows when each was created, when its token
-- was last set and when it was last used (updated at most once a minute, see queries.sql).
-- Existing rows get the time of this migration as their creation and token time. The defaults
-- stay so that an older orderflow inserting a user (seeding during a rolling upgrade) still
-- works; this version always passes its own clock's time.
ALTER TABLE users
    ADD COLUMN created_at   timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN token_set_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN disabled_at  timestamptz,
    ADD COLUMN last_used_at timestamptz;
