-- 003: the operator actions of SPEC §9 and the attempt history.
--   * a flow can be paused (its head is never eligible meanwhile; a paused
--     flow is in neither index), with who paused it, why and when;
--   * audit rows name their flow, may have no event (pause, resume) and no
--     generation, and record the wall-clock time they were written
--     (milliseconds since the Unix epoch, UTC);
--   * an event records when its latest claim happened on the wall clock
--     and the tick it was acked at (for retention, SPEC §8);
--   * attempt: one row per claim of an event (its generation), written when
--     the claim's settle is answered, or when its lease is found run out.
ALTER TABLE flow ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE flow ADD COLUMN paused_by TEXT;
ALTER TABLE flow ADD COLUMN paused_reason TEXT;
ALTER TABLE flow ADD COLUMN paused_at INTEGER;

ALTER TABLE event ADD COLUMN claimed_wall INTEGER NOT NULL DEFAULT 0;
ALTER TABLE event ADD COLUMN acked_at INTEGER;

CREATE TABLE audit_new (
    no              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT,
    flow_id         TEXT NOT NULL,
    action          TEXT NOT NULL,
    reason          TEXT NOT NULL,
    operator        TEXT,
    previous_reason TEXT,
    generation      INTEGER,
    at              INTEGER NOT NULL,
    wall            INTEGER NOT NULL DEFAULT 0
);
INSERT INTO audit_new (no, event_id, flow_id, action, reason, operator, previous_reason, generation, at, wall)
SELECT a.no, a.event_id, coalesce((SELECT e.flow_id FROM event e WHERE e.event_id = a.event_id), ''), a.action, a.reason,
       a.operator, a.previous_reason, a.generation, a.at, 0
FROM audit a;
DROP TABLE audit;
ALTER TABLE audit_new RENAME TO audit;

CREATE TABLE attempt (
    event_id     TEXT NOT NULL REFERENCES event (event_id) ON DELETE CASCADE,
    generation   INTEGER NOT NULL,
    flow_id      TEXT NOT NULL,
    lease_until  INTEGER NOT NULL,
    claimed_wall INTEGER NOT NULL,
    settled_at   INTEGER,
    settled_wall INTEGER,
    outcome      TEXT NOT NULL,
    status       TEXT NOT NULL,
    detail       TEXT NOT NULL,
    duration_ms  INTEGER NOT NULL,
    relay        TEXT NOT NULL,
    PRIMARY KEY (event_id, generation)
) WITHOUT ROWID;
CREATE INDEX attempt_settled ON attempt (settled_wall) WHERE settled_wall IS NOT NULL;
