-- 027: an event records the process of its latest claim (claimed_by, the
-- claim's relay name; '' when the claimer gave none), so that an attempt
-- whose lease ran out unsettled (status lease_expired, written by a later
-- claim, often another relay's) names the relay that lost it: the one to
-- look at after a crash. SQLite migration 006 is the same.
--
-- A mutable column of the event, so part of the head state (migration
-- 004: head_claimed_by on the flow row) and of event_now, as claimed_wall
-- (migration 006). Adding a column with a constant default rewrites no
-- table. Run again, nothing changes.
ALTER TABLE flow ADD COLUMN IF NOT EXISTS head_claimed_by TEXT;
ALTER TABLE event ADD COLUMN IF NOT EXISTS claimed_by TEXT NOT NULL DEFAULT '';

CREATE OR REPLACE VIEW event_now AS
SELECT e.event_id, e.flow_id, e.seq, e.body,
       CASE WHEN f.head_state_seq = e.seq THEN f.head_state ELSE e.own_state END AS state,
       CASE WHEN f.head_state_seq = e.seq THEN f.head_generation ELSE e.generation END AS generation,
       CASE WHEN f.head_state_seq = e.seq THEN f.head_attempts ELSE e.attempts END AS attempts,
       CASE WHEN f.head_state_seq = e.seq THEN f.head_lifetime_attempts ELSE e.lifetime_attempts END AS lifetime_attempts,
       CASE WHEN f.head_state_seq = e.seq THEN f.head_reason ELSE e.reason END AS reason,
       CASE WHEN f.head_state_seq = e.seq THEN f.head_next_at ELSE e.next_at END AS next_at,
       CASE WHEN f.head_state_seq = e.seq THEN f.head_lease_until ELSE e.lease_until END AS lease_until,
       e.enqueued_at,
       CASE WHEN f.head_state_seq = e.seq THEN coalesce(f.head_claimed_wall, 0) ELSE e.claimed_wall END AS claimed_wall,
       CASE WHEN f.head_state_seq = e.seq THEN f.head_acked_at ELSE e.acked_at END AS acked_at,
       CASE WHEN f.head_state_seq = e.seq THEN coalesce(f.head_claimed_by, '') ELSE e.claimed_by END AS claimed_by
FROM event e JOIN flow f ON f.flow_id = e.flow_id;
