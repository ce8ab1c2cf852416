-- 036: a tombstone keeps the wall-clock time of its event's last claim
-- (claimed_wall, milliseconds since the Unix epoch; 0 for the tombstones
-- written before, which the ticks alone then govern), so that a retention
-- counted by a clock (the relay's --retain-ids) can also hold back, by the
-- wall clock, what a store whose tick jumped ahead would delete (a fresh
-- user's report: every id forgotten at once). SQLite migration 007 is the
-- same. A constant default: no table rewrite; IF NOT EXISTS: it may run
-- again as it is.
ALTER TABLE tombstone ADD COLUMN IF NOT EXISTS claimed_wall BIGINT NOT NULL DEFAULT 0;
