-- Queries of the PostgreSQL queue store: the statements of the SQLite
-- backend's queries.sql with $n placeholders. Each block starts with
-- "-- name: X" and is one statement; pgstore.go loads them by name at init.
-- Tables are unqualified: the store's schema is on the connection's
-- search_path.

-- name: ClockGet
SELECT tick, ticket, flows FROM clock WHERE id = 1;

-- name: ClockLock
-- Writers queue on a transaction-scoped advisory lock of the store's schema
-- before they lock the clock row: the lock manager wakes them one at a time,
-- where waiters on a row lock all wake at each commit and fight for the row
-- again (a convoy that collapses throughput with dozens of claimers). The
-- row lock below stays: it is what makes a writer that skipped this lock,
-- or a REPEATABLE READ caller transaction, safe (it fails, serialised).
SELECT pg_advisory_xact_lock(1718186354, hashtext(current_schema()));

-- name: ClockGetForUpdate
-- Every write transaction locks the clock row first: writers are serialised
-- on it, which gives exactly SQLite's one-writer answers (SPEC §4: the same
-- answers). Under READ COMMITTED each later statement then sees every commit
-- made before the lock was granted.
-- The earliest wait_until comes along (flow_waiting's first entry): while
-- it lies after a claim's tick, no head is due and FlowListDue needs no
-- round trip. The subquery's snapshot is taken after ClockLock was granted,
-- so every earlier writer has committed.
SELECT tick, ticket, flows, (SELECT min(wait_until) FROM flow WHERE wait_until IS NOT NULL)
FROM clock WHERE id = 1 FOR UPDATE;

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
-- Quarantined events are heads of parked flows (see migration 002): read
-- them through the partial index flow_parked_head.
SELECT e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at
FROM flow f JOIN event e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE NOT f.runnable AND f.wait_until IS NULL AND f.head_seq <= f.seq
  AND e.state = 'quarantined' AND (f.flow_id, f.head_seq) > ($1, $2)
ORDER BY f.flow_id LIMIT $3;

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

-- name: EventGetWithFlow
-- EventGet of a write transaction: the event and its flow in one round trip
-- (settle reads both). The foreign key guarantees the flow row.
SELECT e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at,
       f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until
FROM event e JOIN flow f ON f.flow_id = e.flow_id WHERE e.event_id = $1;

-- name: FlowPickRunnableSeedHeads
-- FlowPickRunnableSeed of a write transaction, read ahead: the next runnable
-- flows with their head events (has_head false when the head row is missing,
-- which the protocol reports as an inconsistent store).
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, e.event_id IS NOT NULL,
       coalesce(e.event_id, ''), coalesce(e.flow_id, ''), coalesce(e.seq, 0), coalesce(e.body, ''::bytea), coalesce(e.state, ''),
       coalesce(e.generation, 0), coalesce(e.attempts, 0), coalesce(e.lifetime_attempts, 0), e.reason,
       coalesce(e.next_at, 0), coalesce(e.lease_until, 0), coalesce(e.enqueued_at, 0)
FROM flow f LEFT JOIN event e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.runnable ORDER BY f.served, f.flow_id LIMIT $1;

-- name: FlowPickRunnableFairHeads
-- As FlowPickRunnableSeedHeads, in the fair policy's order.
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, e.event_id IS NOT NULL,
       coalesce(e.event_id, ''), coalesce(e.flow_id, ''), coalesce(e.seq, 0), coalesce(e.body, ''::bytea), coalesce(e.state, ''),
       coalesce(e.generation, 0), coalesce(e.attempts, 0), coalesce(e.lifetime_attempts, 0), e.reason,
       coalesce(e.next_at, 0), coalesce(e.lease_until, 0), coalesce(e.enqueued_at, 0)
FROM flow f LEFT JOIN event e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.runnable ORDER BY f.served, f.ord LIMIT $1;

-- The set-based writes of a write transaction: the rows written by many
-- FlowInsert, EventInsert, FlowUpdate and EventUpdate calls, one statement
-- per kind, sent with the next read or the commit (see writeSet).

-- name: FlowInsertMany
INSERT INTO flow (flow_id, ord, seq, served, head_seq, runnable, wait_until)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::boolean[], $7::bigint[]);

-- name: EventInsertMany
INSERT INTO event (event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[], $5::text[], $6::bigint[], $7::bigint[], $8::bigint[], $9::text[], $10::bigint[], $11::bigint[], $12::bigint[]);

-- name: FlowUpdateMany
UPDATE flow SET seq = u.seq, served = u.served, head_seq = u.head_seq, runnable = u.runnable, wait_until = u.wait_until
FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::boolean[], $6::bigint[]) AS u (flow_id, seq, served, head_seq, runnable, wait_until)
WHERE flow.flow_id = u.flow_id COLLATE "C";

-- name: EventUpdateMany
UPDATE event SET state = u.state, generation = u.generation, attempts = u.attempts, lifetime_attempts = u.lifetime_attempts,
    reason = u.reason, next_at = u.next_at, lease_until = u.lease_until
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[], $7::bigint[], $8::bigint[])
    AS u (event_id, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until)
WHERE event.event_id = u.event_id COLLATE "C";

-- name: EventGetManyWithFlow
-- Prefetch: the events of a batch with their flows.
SELECT e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at,
       f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until
FROM event e JOIN flow f ON f.flow_id = e.flow_id WHERE e.event_id = ANY ($1::text[]);

-- name: FlowGetMany
-- Prefetch: the flows of a batch.
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until FROM flow WHERE flow_id = ANY ($1::text[]);
