-- Queries of the SQLite queue store. Each block starts with "-- name: X" and
-- is one statement; sqlitestore.go loads them by name at init and prepares
-- them on the write connection.

-- name: ClockGet
SELECT tick, ticket, flows FROM clock WHERE id = 1;

-- name: ClockSet
UPDATE clock SET tick = ?, ticket = ?, flows = ? WHERE id = 1;

-- name: SettingsGet
SELECT entry FROM settings WHERE id = 1;

-- name: SettingsSetEntry
UPDATE settings SET entry = ? WHERE id = 1;

-- name: FlowGet
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, paused, paused_by, paused_reason, paused_at FROM flow WHERE flow_id = ?;

-- name: FlowInsert
INSERT INTO flow (flow_id, ord, seq, served, head_seq, runnable, wait_until) VALUES (?, ?, ?, ?, ?, ?, ?);

-- name: FlowUpdate
UPDATE flow SET seq = ?, served = ?, head_seq = ?, runnable = ?, wait_until = ?,
    paused = ?, paused_by = ?, paused_reason = ?, paused_at = ? WHERE flow_id = ?;

-- name: FlowPickSeed
-- The runnable index in the seed policy's dispatch order (SPEC §2 step 3),
-- with each flow's head.
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.paused, f.paused_by, f.paused_reason, f.paused_at,
       e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at
FROM flow f INDEXED BY flow_runnable_seed LEFT JOIN event e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.runnable = 1 ORDER BY f.served, f.flow_id LIMIT ?;

-- name: FlowPickFair
-- The runnable index in the fair policy's dispatch order (SPEC §7).
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.paused, f.paused_by, f.paused_reason, f.paused_at,
       e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at
FROM flow f INDEXED BY flow_runnable_fair LEFT JOIN event e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.runnable = 1 ORDER BY f.served, f.ord LIMIT ?;

-- name: FlowDue
-- The due index: flows whose wait_until has come by ?1, after the key
-- (?2, ?3), with their heads.
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.paused, f.paused_by, f.paused_reason, f.paused_at,
       e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at
FROM flow f INDEXED BY flow_waiting LEFT JOIN event e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.wait_until IS NOT NULL AND f.wait_until <= ?1 AND (f.wait_until, f.flow_id) > (?2, ?3)
ORDER BY f.wait_until, f.flow_id LIMIT ?4;

-- name: FlowNextWait
SELECT min(wait_until) FROM flow WHERE wait_until IS NOT NULL;

-- name: FlowList
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, paused, paused_by, paused_reason, paused_at FROM flow
WHERE flow_id > ? ORDER BY flow_id LIMIT ?;

-- name: EventGet
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at, claimed_wall, acked_at
FROM event WHERE event_id = ?;

-- name: EventGetBySeq
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at, claimed_wall, acked_at
FROM event WHERE flow_id = ? AND seq = ?;

-- name: EventInsert
INSERT INTO event (event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: EventUpdate
UPDATE event SET state = ?, generation = ?, attempts = ?, lifetime_attempts = ?, reason = ?, next_at = ?, lease_until = ?,
    claimed_wall = ?, acked_at = ?
WHERE event_id = ?;

-- name: EventList
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at, claimed_wall, acked_at
FROM event WHERE (flow_id, seq) > (?, ?) ORDER BY flow_id, seq LIMIT ?;

-- name: QuarantinedList
-- The literal state lets SQLite use the partial index event_quarantined; a
-- quarantined event is its flow's head, one per flow at most.
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at, claimed_wall, acked_at
FROM event WHERE state = 'quarantined' AND flow_id > ? ORDER BY flow_id, seq LIMIT ?;

-- name: AuditInsert
INSERT INTO audit (event_id, flow_id, action, reason, operator, previous_reason, generation, at, wall) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: AuditList
SELECT no, event_id, flow_id, action, reason, operator, previous_reason, generation, at, wall FROM audit WHERE no > ? ORDER BY no LIMIT ?;

-- name: AttemptInsert
-- The first word on an attempt wins: a settle's answer, or the lease found
-- run out, whichever is recorded first.
INSERT INTO attempt (event_id, generation, flow_id, lease_until, claimed_wall, settled_at, settled_wall, outcome, status, detail, duration_ms, relay)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (event_id, generation) DO NOTHING;

-- name: AttemptList
SELECT event_id, generation, flow_id, lease_until, claimed_wall, settled_at, settled_wall, outcome, status, detail, duration_ms, relay
FROM attempt WHERE event_id = ? ORDER BY generation;
