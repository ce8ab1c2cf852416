-- Queries of the SQLite queue store. Each block starts with "-- name: X" and
-- is one statement; sqlitestore.go loads them by name at init.

-- name: ClockGet
SELECT tick, ticket, flows FROM clock WHERE id = 1;

-- name: ClockSet
UPDATE clock SET tick = ?, ticket = ?, flows = ? WHERE id = 1;

-- name: FlowGet
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until FROM flow WHERE flow_id = ?;

-- name: FlowInsert
INSERT INTO flow (flow_id, ord, seq, served, head_seq, runnable, wait_until) VALUES (?, ?, ?, ?, ?, ?, ?);

-- name: FlowUpdate
UPDATE flow SET seq = ?, served = ?, head_seq = ?, runnable = ?, wait_until = ? WHERE flow_id = ?;

-- name: FlowListDue
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until FROM flow
WHERE wait_until IS NOT NULL AND wait_until <= ?
ORDER BY wait_until LIMIT ?;

-- name: FlowPickRunnableSeed
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until FROM flow INDEXED BY flow_runnable_seed
WHERE runnable = 1 ORDER BY served, flow_id LIMIT ?;

-- name: FlowPickRunnableFair
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until FROM flow INDEXED BY flow_runnable_fair
WHERE runnable = 1 ORDER BY served, ord LIMIT ?;

-- name: FlowList
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until FROM flow
WHERE flow_id > ? ORDER BY flow_id LIMIT ?;

-- name: EventGet
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at
FROM event WHERE event_id = ?;

-- name: EventGetBySeq
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at
FROM event WHERE flow_id = ? AND seq = ?;

-- name: EventInsert
INSERT INTO event (event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: EventUpdate
UPDATE event SET state = ?, generation = ?, attempts = ?, lifetime_attempts = ?, reason = ?, next_at = ?, lease_until = ?
WHERE event_id = ?;

-- name: EventList
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at
FROM event WHERE (flow_id, seq) > (?, ?) ORDER BY flow_id, seq LIMIT ?;

-- name: EventListState
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at
FROM event WHERE state = ? AND (flow_id, seq) > (?, ?) ORDER BY flow_id, seq LIMIT ?;

-- name: EventListQuarantined
-- The literal state lets SQLite use the partial index event_quarantined.
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at
FROM event WHERE state = 'quarantined' AND (flow_id, seq) > (?, ?) ORDER BY flow_id, seq LIMIT ?;

-- name: AuditInsert
INSERT INTO audit (event_id, action, reason, operator, previous_reason, generation, at) VALUES (?, ?, ?, ?, ?, ?, ?);

-- name: AuditList
SELECT no, event_id, action, reason, operator, previous_reason, generation, at FROM audit WHERE no > ? ORDER BY no LIMIT ?;
