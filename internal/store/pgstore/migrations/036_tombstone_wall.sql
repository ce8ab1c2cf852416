-- 036: a tombstone keeps the wall-clock time of its event's last claim
-- (claimed_wall, milliseconds since the Unix epoch), so that a retention
-- counted by a clock (the relay's --retain-ids) can also hold back, by the
-- wall clock, what a store whose tick jumped ahead would delete (a fresh
-- user's report: every id forgotten at once). SQLite migration 007 is the
-- same. A constant default: no table rewrite; IF NOT EXISTS and the
-- update of the undated rows only: it may run again as it is.
--
-- The tombstones written before are dated now less their age in ticks (the
-- stored tick less their acked_at): a tick runs no faster than the wall
-- clock but by the jumps max_tick_jump allows, so that is no earlier than
-- their claim, and a tick that jumps after this migration does not forget
-- them (a breaker's report: 0 left them to the ticks alone). At least 1: 0
-- means "not known" (the ticks alone decide).
ALTER TABLE tombstone ADD COLUMN IF NOT EXISTS claimed_wall BIGINT NOT NULL DEFAULT 0;
UPDATE tombstone SET claimed_wall = greatest(1,
    (extract(epoch FROM clock_timestamp()) * 1000)::bigint - ((SELECT tick FROM stored_clock) - acked_at))
WHERE claimed_wall = 0;
-- A tombstone an older build still running writes (without claimed_wall)
-- is dated when it is written: at the prune, which is no earlier than its
-- event's claim. Set after the column, so that the existing rows are not
-- rewritten.
ALTER TABLE tombstone ALTER COLUMN claimed_wall SET DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
