-- 006: the operator actions of SPEC §9 and the attempt history (the
-- SQLite backend's 003, same columns).
--   * a flow can be paused (its head is never eligible meanwhile; a paused
--     flow is in neither index), with who paused it, why and when;
--   * audit rows name their flow, may have no event (pause, resume) and no
--     generation, and record the wall-clock time they were written
--     (milliseconds since the Unix epoch, UTC);
--   * an event records when its latest claim happened on the wall clock
--     and the tick it was acked at (for retention, SPEC §8); both are
--     mutable columns, so they are part of the head state (migration 004)
--     and of event_now;
--   * attempt: one row per claim of an event (its generation), written when
--     the claim's settle is answered, or when its lease is found run out.
ALTER TABLE flow
    ADD COLUMN paused BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN paused_by TEXT,
    ADD COLUMN paused_reason TEXT,
    ADD COLUMN paused_at BIGINT,
    ADD COLUMN head_claimed_wall BIGINT,
    ADD COLUMN head_acked_at BIGINT;
ALTER TABLE event
    ADD COLUMN claimed_wall BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN acked_at BIGINT;

ALTER TABLE audit
    ALTER COLUMN event_id DROP NOT NULL,
    ALTER COLUMN generation DROP NOT NULL,
    ADD COLUMN flow_id TEXT COLLATE "C",
    ADD COLUMN wall BIGINT NOT NULL DEFAULT 0;
UPDATE audit a SET flow_id = coalesce((SELECT e.flow_id FROM event e WHERE e.event_id = a.event_id), '');
ALTER TABLE audit ALTER COLUMN flow_id SET NOT NULL;

CREATE TABLE attempt (
    event_id     TEXT COLLATE "C" NOT NULL REFERENCES event (event_id) ON DELETE CASCADE,
    generation   BIGINT NOT NULL,
    flow_id      TEXT COLLATE "C" NOT NULL,
    lease_until  BIGINT NOT NULL,
    claimed_wall BIGINT NOT NULL,
    settled_at   BIGINT,
    settled_wall BIGINT,
    outcome      TEXT NOT NULL,
    status       TEXT NOT NULL,
    detail       TEXT NOT NULL,
    duration_ms  BIGINT NOT NULL,
    relay        TEXT NOT NULL,
    PRIMARY KEY (event_id, generation)
);
CREATE INDEX attempt_settled ON attempt (settled_wall) WHERE settled_wall IS NOT NULL;

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
       CASE WHEN f.head_state_seq = e.seq THEN f.head_acked_at ELSE e.acked_at END AS acked_at
FROM event e JOIN flow f ON f.flow_id = e.flow_id;

-- A paused flow is in neither index (SPEC §9), whoever writes it: the Go
-- side parks it itself, and this trigger parks it for the writers in SQL
-- (enqueue(), enqueue_many(), which make a new head runnable). The WHEN
-- clause is evaluated without calling the function, so the hot path (no
-- paused flow) pays nothing but the test.
CREATE FUNCTION park_paused_flow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.runnable := false;
    NEW.wait_until := NULL;
    RETURN NEW;
END
$$;
CREATE TRIGGER flow_park_paused BEFORE UPDATE ON flow FOR EACH ROW
    WHEN (NEW.paused AND (NEW.runnable OR NEW.wait_until IS NOT NULL))
    EXECUTE FUNCTION park_paused_flow();
