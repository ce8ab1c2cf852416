-- 004: a claim writes one row instead of two. The mutable columns of one
-- event of each flow (state, generation, attempts, lifetime_attempts,
-- reason, next_at, lease_until) may be kept on the flow row instead of the
-- event row: head_state_seq says which event they belong to, and for that
-- event they win over its own row. It is the last event a transaction that
-- wrote the flow row changed: the head (claimed, retried, quarantined,
-- redriven) or, once acked, the event the head moved past, until the flow's
-- next head state replaces it and gives it back to its row. So a claim
-- writes the flow row alone, and an ack that drains its flow does too.
-- Every read of an event applies them (queries.sql), so the answers do not
-- change. Rows from before this migration have NULL here: their event rows
-- hold their columns.
--
-- A fairrelay built before this migration would read event rows as if they
-- held every event's state, misread the heads and re-issue their tokens,
-- and it does not check the migrations a store records (later builds
-- refuse a store migrated further than they know). So the event row's state
-- column is renamed: such a build fails on its first read of an event
-- (column "state" does not exist) instead of corrupting the store.
ALTER TABLE flow
    ADD COLUMN head_state_seq         BIGINT,
    ADD COLUMN head_state             TEXT,
    ADD COLUMN head_generation        BIGINT,
    ADD COLUMN head_attempts          BIGINT,
    ADD COLUMN head_lifetime_attempts BIGINT,
    ADD COLUMN head_reason            TEXT,
    ADD COLUMN head_next_at           BIGINT,
    ADD COLUMN head_lease_until       BIGINT;
ALTER TABLE event RENAME COLUMN state TO own_state;
