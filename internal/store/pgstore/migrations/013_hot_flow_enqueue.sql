-- 013: an enqueue onto a flow that already has a head updates the flow row
-- HOT (heap-only: no index entries written, no dead index entries left).
-- Such an enqueue changes the flow's seq and nothing else that is indexed
-- (its tick only when the call's tick is newer), but seq appeared in the
-- predicate of flow_parked_head (migration 002: head_seq <= seq, "the flow
-- has a head"), and a column of a partial index's predicate counts as
-- indexed: every enqueue wrote a new entry into each of the flow's indexes
-- its row is in (measured: 0 of 300 such updates HOT). The predicate now
-- reads a stored generated column, parked, which is recomputed on every
-- update but changes only when the flow is parked or unparked; PostgreSQL
-- compares an indexed column's old and new values, so an update that
-- leaves parked as it was can be HOT. Same rows in the index, same
-- answers: the queries that read quarantined heads test parked instead of
-- the three conditions.
--
-- A HOT update also needs room on its page: flow pages keep 30 % free
-- (set first, so that the rewrite of the table that the new column
-- causes lays the rows out that way).
ALTER TABLE flow SET (fillfactor = 70);
ALTER TABLE flow ADD COLUMN parked BOOLEAN GENERATED ALWAYS AS (NOT runnable AND wait_until IS NULL AND head_seq <= seq) STORED;
DROP INDEX flow_parked_head;
CREATE INDEX flow_parked_head ON flow (flow_id) WHERE parked;
