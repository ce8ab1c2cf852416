-- 007: a tombstone keeps the wall-clock time of its event's last claim
-- (claimed_wall, milliseconds since the Unix epoch), so that a retention
-- counted by a clock (the relay's --retain-ids) can also hold back, by the
-- wall clock, what a store whose tick jumped ahead would delete (a fresh
-- user's report: every id forgotten at once). PostgreSQL migration 036 is
-- the same.
--
-- The tombstones written before are dated now less their age in ticks (the
-- stored tick less their acked_at): a tick runs no faster than the wall
-- clock but by the jumps max_tick_jump allows, so that is no earlier than
-- their claim, and a tick that jumps after this migration does not forget
-- them (a breaker's report: 0 left them to the ticks alone). At least 1: 0
-- means "not known" (the ticks alone decide).
ALTER TABLE tombstone ADD COLUMN claimed_wall INTEGER NOT NULL DEFAULT 0;
UPDATE tombstone SET claimed_wall = max(1,
    CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - ((SELECT tick FROM clock WHERE id = 1) - acked_at));
-- A tombstone an older build still running writes (without claimed_wall)
-- is dated when it is written: at the prune, which is no earlier than its
-- event's claim.
CREATE TRIGGER tombstone_dated AFTER INSERT ON tombstone FOR EACH ROW WHEN NEW.claimed_wall = 0
BEGIN
    UPDATE tombstone SET claimed_wall = CAST(unixepoch('subsec') * 1000 AS INTEGER) WHERE event_id = NEW.event_id;
END;
