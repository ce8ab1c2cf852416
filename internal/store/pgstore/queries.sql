-- Queries of the PostgreSQL queue store: the statements of the SQLite
-- backend's queries.sql with $n placeholders. Each block starts with
-- "-- name: X" and is one statement; pgstore.go loads them by name at init.
-- Tables are unqualified: the store's schema is on the connection's
-- search_path.

-- name: ClockGet
SELECT tick, ticket, flows FROM clock WHERE id = 1;

-- name: ClockGetForUpdate
-- Every write transaction locks the clock row first: writers are serialised
-- on it, which gives exactly SQLite's one-writer answers (SPEC §4: the same
-- answers). Under READ COMMITTED each later statement then sees every commit
-- made before the lock was granted.
SELECT tick, ticket, flows FROM clock WHERE id = 1 FOR UPDATE;

-- name: ClockSet
UPDATE clock SET tick = $1, ticket = $2, flows = $3 WHERE id = 1;

-- name: FlowGet
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until FROM flow WHERE flow_id = $1;

-- name: FlowInsert
INSERT INTO flow (flow_id, ord, seq, served, head_seq, runnable, wait_until) VALUES ($1, $2, $3, $4, $5, $6, $7);

-- name: FlowUpdate
UPDATE flow SET seq = $1, served = $2, head_seq = $3, runnable = $4, wait_until = $5 WHERE flow_id = $6;

-- name: FlowListDue
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until FROM flow
WHERE wait_until IS NOT NULL AND wait_until <= $1
ORDER BY wait_until LIMIT $2;

-- name: FlowPickRunnableSeed
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until FROM flow
WHERE runnable ORDER BY served, flow_id LIMIT $1;

-- name: FlowPickRunnableFair
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until FROM flow
WHERE runnable ORDER BY served, ord LIMIT $1;

-- name: FlowList
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until FROM flow
WHERE flow_id > $1 ORDER BY flow_id LIMIT $2;

-- name: EventGet
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at
FROM event WHERE event_id = $1;

-- name: EventGetBySeq
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at
FROM event WHERE flow_id = $1 AND seq = $2;

-- name: EventInsert
INSERT INTO event (event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12);

-- name: EventUpdate
UPDATE event SET state = $1, generation = $2, attempts = $3, lifetime_attempts = $4, reason = $5, next_at = $6, lease_until = $7
WHERE event_id = $8;

-- name: EventList
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at
FROM event WHERE (flow_id, seq) > ($1, $2) ORDER BY flow_id, seq LIMIT $3;

-- name: EventListState
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at
FROM event WHERE state = $1 AND (flow_id, seq) > ($2, $3) ORDER BY flow_id, seq LIMIT $4;

-- name: EventListQuarantined
-- The literal state lets the planner use the partial index event_quarantined.
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at
FROM event WHERE state = 'quarantined' AND (flow_id, seq) > ($1, $2) ORDER BY flow_id, seq LIMIT $3;

-- name: AuditInsert
INSERT INTO audit (event_id, action, reason, operator, previous_reason, generation, at) VALUES ($1, $2, $3, $4, $5, $6, $7);

-- name: AuditList
SELECT no, event_id, action, reason, operator, previous_reason, generation, at FROM audit WHERE no > $1 ORDER BY no LIMIT $2;

-- name: CurrentSchema
SELECT current_schema();

-- name: SearchPathGet
SELECT current_setting('search_path');

-- name: SearchPathSetLocal
-- Puts the store's schema in front for the rest of a caller's transaction
-- statement by statement (Wrap); the value is a parameter, never SQL text.
SELECT set_config('search_path', $1, true);
