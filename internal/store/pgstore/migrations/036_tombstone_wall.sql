-- 036: a tombstone keeps the wall-clock time of its event's last claim
-- (claimed_wall, milliseconds since the Unix epoch; 0: not known), so that
-- a retention counted by a clock (the relay's --retain-ids) can also hold
-- back, by the wall clock, what a store whose tick jumped ahead would
-- delete (a fresh user's report: every id forgotten at once). SQLite
-- migration 007 is the same.
--
-- The tombstones written before keep 0 (a constant default: no table
-- rewrite, and no update of every row under the ALTER's lock, which every
-- enqueue's id check would wait behind) and are dated when a prune reads
-- them, by tombstone_epoch: the migration's wall time less their age in
-- ticks then (the stored tick less their acked_at). A tick runs no faster
-- than the wall clock but by the jumps max_tick_jump allows, so that is no
-- earlier than their claim, and a tick that jumps after the upgrade does
-- not forget them (a breaker's report: left to the ticks alone, they were).
-- tombstone_epoch.migrated_tick is a tick column: the poisoned-tick repair
-- of docs/operations.md shifts it with the others.
-- A tombstone an older build still running writes keeps 0 and is dated the
-- same way. IF NOT EXISTS and ON CONFLICT: it may run again as it is.
ALTER TABLE tombstone ADD COLUMN IF NOT EXISTS claimed_wall BIGINT NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS tombstone_epoch (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    migrated_ms   BIGINT NOT NULL,
    migrated_tick BIGINT NOT NULL
);
INSERT INTO tombstone_epoch (id, migrated_ms, migrated_tick)
SELECT 1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, tick FROM stored_clock
ON CONFLICT (id) DO NOTHING;
