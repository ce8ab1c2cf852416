-- 007: a tombstone keeps the wall-clock time of its event's last claim
-- (claimed_wall, milliseconds since the Unix epoch; 0: not known), so that
-- a retention counted by a clock (the relay's --retain-ids) can also hold
-- back, by the wall clock, what a store whose tick jumped ahead would
-- delete (a fresh user's report: every id forgotten at once). PostgreSQL
-- migration 036 is the same.
--
-- The tombstones written before keep 0 (a constant default: no row is
-- rewritten, so the migration holds the writer for no longer on a large
-- store) and are dated when a prune reads them, by tombstone_epoch: the
-- migration's wall time less their age in ticks then (the stored tick
-- less their acked_at). A tick runs no faster than the wall clock but by
-- the jumps max_tick_jump allows, so that is no earlier than their claim,
-- and a tick that jumps after the upgrade does not forget them (a
-- breaker's report: left to the ticks alone, they were).
-- tombstone_epoch.migrated_tick is a tick column: the poisoned-tick repair
-- of docs/operations.md shifts it with the others.
ALTER TABLE tombstone ADD COLUMN claimed_wall INTEGER NOT NULL DEFAULT 0;
CREATE TABLE tombstone_epoch (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    migrated_ms   INTEGER NOT NULL,
    migrated_tick INTEGER NOT NULL
);
INSERT INTO tombstone_epoch (id, migrated_ms, migrated_tick)
SELECT 1, CAST(unixepoch('subsec') * 1000 AS INTEGER), tick FROM clock WHERE id = 1;
-- A tombstone an older build still running writes (naming no
-- claimed_wall) takes its event's, which is deleted after it in the same
-- transaction.
CREATE TRIGGER tombstone_dated AFTER INSERT ON tombstone FOR EACH ROW WHEN NEW.claimed_wall = 0
BEGIN
    UPDATE tombstone SET claimed_wall = coalesce((SELECT e.claimed_wall FROM event e WHERE e.event_id = NEW.event_id), 0)
    WHERE event_id = NEW.event_id;
END;
