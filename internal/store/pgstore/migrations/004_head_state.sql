-- 004: a claim writes one row instead of two. The mutable columns of a
-- flow's head event (state, generation, attempts, lifetime_attempts,
-- reason, next_at, lease_until) may be kept on the flow row instead of the
-- event row: head_state_seq says which event they describe. They are that
-- event's columns while head_state_seq = head_seq = the event's seq; in
-- every other case (NULL, or the head has moved on) the event row is
-- authoritative. A claim, a retry, a quarantine and a redrive of a head
-- write them here, on the flow row they write anyway; the write that moves
-- the head past the event (an ack) writes the event row with its final
-- values. Every read of an event applies them (queries.sql), so the
-- answers do not change. Rows from before this migration have NULL here:
-- their event rows are authoritative.
ALTER TABLE flow
    ADD COLUMN head_state_seq         BIGINT,
    ADD COLUMN head_state             TEXT,
    ADD COLUMN head_generation        BIGINT,
    ADD COLUMN head_attempts          BIGINT,
    ADD COLUMN head_lifetime_attempts BIGINT,
    ADD COLUMN head_reason            TEXT,
    ADD COLUMN head_next_at           BIGINT,
    ADD COLUMN head_lease_until       BIGINT;
