-- Queries of the PostgreSQL queue store: the statements of the SQLite
-- backend's queries.sql with $n placeholders. Each block starts with
-- "-- name: X" and is one statement; pgstore.go loads them by name at init.
-- Tables are unqualified: the store's schema is on the connection's
-- search_path.

-- name: ClockGet
-- The clock of SPEC §2 from its lane rows (migration 003): the largest tick,
-- the claim lane's ticket, the enqueue lane's flow count.
SELECT max(tick), max(ticket) FILTER (WHERE id = 1), max(flows) FILTER (WHERE id = 2) FROM clock;

-- name: ClockLock
-- Writers of a lane queue on a transaction-scoped advisory lock of the
-- store's schema and lane before they lock their lane's clock row ($1: the
-- clock row ids of the transaction's lanes, ascending, so that a
-- transaction holding two lanes takes them in the same order as every
-- other): the lock manager wakes them one at a time, where waiters on a row
-- lock all wake at each commit and fight for the row again (a convoy that
-- collapses throughput with dozens of claimers). The row lock below stays:
-- it is what makes a writer that skipped this lock, or a REPEATABLE READ
-- caller transaction, safe (it fails, serialised).
SELECT pg_advisory_xact_lock(1718186353 + l, hashtext(current_schema())) FROM unnest($1::integer[]) AS l;

-- name: ClockGetForUpdate
-- Every write transaction locks its lanes' clock rows first ($1): the
-- writers of a lane are serialised on it, which gives the lane exactly
-- SQLite's one-writer answers (SPEC §4: the same answers). Under READ
-- COMMITTED each later statement then sees every commit made before the
-- lock was granted. The other lanes' rows are read as last committed:
-- their writers run at the same time, on other rows or under row locks.
-- The earliest wait_until comes along (flow_waiting's first entry): while
-- it lies after a claim's tick, no head is due and FlowListDue needs no
-- round trip. A settle may set an earlier one meanwhile; that head is then
-- claimed by a later claim.
-- (count(*) reads every row of "mine", so each of them is locked.)
WITH mine AS MATERIALIZED (SELECT id FROM clock WHERE id = ANY ($1::integer[]) ORDER BY id FOR UPDATE)
SELECT (SELECT max(tick) FROM clock), (SELECT ticket FROM clock WHERE id = 1), (SELECT flows FROM clock WHERE id = 2),
       (SELECT min(wait_until) FROM flow WHERE wait_until IS NOT NULL)
FROM (SELECT count(*) FROM mine) AS locked;

-- name: ClockSet
-- A writer sets its own lanes' rows ($4): the tick, and the counter a lane
-- owns (the claim lane's ticket, the enqueue lane's flows).
UPDATE clock SET tick = $1,
    ticket = CASE WHEN id = 1 THEN $2 ELSE ticket END,
    flows = CASE WHEN id = 2 THEN $3 ELSE flows END
WHERE id = ANY ($4::integer[]);

-- name: FlowGet
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, head_state_seq FROM flow WHERE flow_id = $1;

-- name: FlowGetForUpdate
-- FlowGet of a write transaction: the flow row stays locked until the end,
-- so that the other lane cannot change what this one is about to write.
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, head_state_seq FROM flow WHERE flow_id = $1
FOR NO KEY UPDATE;

-- name: FlowInsert
INSERT INTO flow (flow_id, ord, seq, served, head_seq, runnable, wait_until) VALUES ($1, $2, $3, $4, $5, $6, $7);

-- name: FlowUpdate
UPDATE flow SET seq = $1, served = $2, head_seq = $3, runnable = $4, wait_until = $5 WHERE flow_id = $6;

-- name: FlowListDue
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, head_state_seq FROM flow
WHERE wait_until IS NOT NULL AND wait_until <= $1
ORDER BY wait_until LIMIT $2;

-- name: FlowListDueForUpdate
-- FlowListDue of a claim: the flows it answers stay locked;
-- a flow another transaction holds (a settle of its head, an enqueue) is
-- skipped, never waited for, and is due again at the next claim.
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, head_state_seq FROM flow
WHERE wait_until IS NOT NULL AND wait_until <= $1
ORDER BY wait_until LIMIT $2
FOR NO KEY UPDATE SKIP LOCKED;

-- name: FlowPickRunnableSeed
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, head_state_seq FROM flow
WHERE runnable ORDER BY served, flow_id LIMIT $1;

-- name: FlowPickRunnableFair
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, head_state_seq FROM flow
WHERE runnable ORDER BY served, ord LIMIT $1;

-- name: FlowList
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, head_state_seq FROM flow
WHERE flow_id > $1 ORDER BY flow_id LIMIT $2;

-- name: EventGet
-- Every read of an event applies its flow's head state (migration 004):
-- "/*event e o*/" stands for the event's columns as scanEvent reads them
-- (headStateMacros in pgstore.go).
SELECT /*event e o*/
FROM event e LEFT JOIN flow o ON o.flow_id = e.flow_id AND o.head_state_seq = e.seq WHERE e.event_id = $1;

-- name: EventGetBySeq
SELECT /*event e o*/
FROM event e LEFT JOIN flow o ON o.flow_id = e.flow_id AND o.head_state_seq = e.seq WHERE e.flow_id = $1 AND e.seq = $2;

-- name: EventInsert
INSERT INTO event (event_id, flow_id, seq, body, own_state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12);

-- name: EventUpdate
UPDATE event SET own_state = $1, generation = $2, attempts = $3, lifetime_attempts = $4, reason = $5, next_at = $6, lease_until = $7
WHERE event_id = $8;

-- name: EventList
SELECT /*event e o*/
FROM event e LEFT JOIN flow o ON o.flow_id = e.flow_id AND o.head_state_seq = e.seq WHERE (e.flow_id, e.seq) > ($1, $2) ORDER BY e.flow_id, e.seq LIMIT $3;

-- name: EventListState
SELECT /*event e o*/
FROM event e LEFT JOIN flow o ON o.flow_id = e.flow_id AND o.head_state_seq = e.seq WHERE /*head e o state*/ = $1 AND (e.flow_id, e.seq) > ($2, $3) ORDER BY e.flow_id, e.seq LIMIT $4;

-- name: EventListQuarantined
-- Quarantined events are heads of parked flows (see migration 002): read
-- them through the partial index flow_parked_head.
SELECT /*event e f*/
FROM flow f JOIN event e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE NOT f.runnable AND f.wait_until IS NULL AND f.head_seq <= f.seq
  AND /*head e f state*/ = 'quarantined' AND (f.flow_id, f.head_seq) > ($1, $2)
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

-- name: FlowPickRunnableSeedHeads
-- FlowPickRunnableSeed of a write transaction: the next runnable
-- flows with their head events (has_head false when the head row is missing,
-- which the protocol reports as an inconsistent store). The flows stay
-- locked; one another transaction holds (an enqueue appending to it) is
-- skipped, never waited for. A runnable flow's head cannot change under
-- the lock of another lane: only a claim (this lane, serialised) takes a
-- runnable head, and an enqueue only appends behind it.
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.head_state_seq, e.event_id IS NOT NULL,
       /*event? e f*/
FROM flow f LEFT JOIN event e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.runnable ORDER BY f.served, f.flow_id LIMIT $1
FOR NO KEY UPDATE OF f SKIP LOCKED;

-- name: FlowPickRunnableFairHeads
-- As FlowPickRunnableSeedHeads, in the fair policy's order.
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.head_state_seq, e.event_id IS NOT NULL,
       /*event? e f*/
FROM flow f LEFT JOIN event e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.runnable ORDER BY f.served, f.ord LIMIT $1
FOR NO KEY UPDATE OF f SKIP LOCKED;

-- The set-based writes of a write transaction: the rows written by many
-- FlowInsert, EventInsert, FlowUpdate and EventUpdate calls, one statement
-- per kind, sent with the next read or the commit (see writeSet).

-- name: FlowInsertMany
INSERT INTO flow (flow_id, ord, seq, served, head_seq, runnable, wait_until)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::boolean[], $7::bigint[]);

-- name: EventInsertMany
INSERT INTO event (event_id, flow_id, seq, body, own_state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[], $5::text[], $6::bigint[], $7::bigint[], $8::bigint[], $9::text[], $10::bigint[], $11::bigint[], $12::bigint[]);

-- name: FlowUpdateMany
-- "flow_id = ANY" as well as the join: the planner then finds the rows
-- through the primary key whatever it guesses of unnest's size (without it,
-- it hashes a sequential scan of the whole table once the batch is large).
-- The head state (migration 004): $7.. are the columns of the event the
-- transaction keeps there, $7 its seq; where $7 is NULL the flow keeps the
-- head state it has. FlowFlushHeadState runs first.
UPDATE flow SET seq = u.seq, served = u.served, head_seq = u.head_seq, runnable = u.runnable, wait_until = u.wait_until,
    head_state_seq = CASE WHEN u.hs_seq IS NULL THEN flow.head_state_seq ELSE u.hs_seq END,
    head_state = CASE WHEN u.hs_seq IS NULL THEN flow.head_state ELSE u.hs_state END,
    head_generation = CASE WHEN u.hs_seq IS NULL THEN flow.head_generation ELSE u.hs_generation END,
    head_attempts = CASE WHEN u.hs_seq IS NULL THEN flow.head_attempts ELSE u.hs_attempts END,
    head_lifetime_attempts = CASE WHEN u.hs_seq IS NULL THEN flow.head_lifetime_attempts ELSE u.hs_lifetime_attempts END,
    head_reason = CASE WHEN u.hs_seq IS NULL THEN flow.head_reason ELSE u.hs_reason END,
    head_next_at = CASE WHEN u.hs_seq IS NULL THEN flow.head_next_at ELSE u.hs_next_at END,
    head_lease_until = CASE WHEN u.hs_seq IS NULL THEN flow.head_lease_until ELSE u.hs_lease_until END
FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::boolean[], $6::bigint[],
            $7::bigint[], $8::text[], $9::bigint[], $10::bigint[], $11::bigint[], $12::text[], $13::bigint[], $14::bigint[])
    AS u (flow_id, seq, served, head_seq, runnable, wait_until,
          hs_seq, hs_state, hs_generation, hs_attempts, hs_lifetime_attempts, hs_reason, hs_next_at, hs_lease_until)
WHERE flow.flow_id = ANY ($1::text[]) AND flow.flow_id = u.flow_id COLLATE "C";

-- name: FlowFlushHeadState
-- Before flows ($1) take the head state of another event ($2, its seq):
-- the event whose state they hold now gets it back on its row (migration
-- 004), unless the transaction writes that row itself ($3: the events it
-- writes to their rows, after this statement).
UPDATE event SET own_state = f.head_state, generation = f.head_generation, attempts = f.head_attempts,
    lifetime_attempts = f.head_lifetime_attempts, reason = f.head_reason, next_at = f.head_next_at, lease_until = f.head_lease_until
FROM flow f, unnest($1::text[], $2::bigint[]) AS u (flow_id, seq)
WHERE f.flow_id = ANY ($1::text[]) AND f.flow_id = u.flow_id COLLATE "C"
  AND f.head_state_seq <> u.seq
  AND event.flow_id = f.flow_id AND event.seq = f.head_state_seq
  AND event.event_id <> ALL ($3::text[]);

-- name: FlowClearHeadState
-- An event row written while its flow row is not: the flow's head state
-- (migration 004), if it describes that event ($1, $2 pairs of flow and
-- seq), stops applying; the event row now holds the event's columns.
UPDATE flow SET head_state_seq = NULL
FROM unnest($1::text[], $2::bigint[]) AS u (flow_id, seq)
WHERE flow.flow_id = ANY ($1::text[]) AND flow.flow_id = u.flow_id COLLATE "C" AND flow.head_state_seq = u.seq;

-- name: EventUpdateMany
UPDATE event SET own_state = u.state, generation = u.generation, attempts = u.attempts, lifetime_attempts = u.lifetime_attempts,
    reason = u.reason, next_at = u.next_at, lease_until = u.lease_until
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[], $7::bigint[], $8::bigint[])
    AS u (event_id, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until)
WHERE event.event_id = ANY ($1::text[]) AND event.event_id = u.event_id COLLATE "C";

-- name: EventGetManyWithFlow
-- Prefetch of a settle or redrive: the events with their flows (settle
-- reads both), after FlowLockOfEvents.
SELECT /*event e f*/,
       f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.head_state_seq
FROM event e JOIN flow f ON f.flow_id = e.flow_id WHERE e.event_id = ANY ($1::text[]);

-- name: FlowGetMany
-- Prefetch: the flows of a batch, locked until the end of the transaction
-- in flow_id order (every transaction that waits for flow locks takes them
-- in that order, in one statement: no deadlock between the lanes).
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, head_state_seq FROM flow WHERE flow_id = ANY ($1::text[])
ORDER BY flow_id FOR NO KEY UPDATE;

-- name: EventGetMany
-- Prefetch of an enqueue: the events of a batch (an id already stored
-- answers existing or conflict; its row's identity never changes).
SELECT /*event e o*/
FROM event e LEFT JOIN flow o ON o.flow_id = e.flow_id AND o.head_state_seq = e.seq WHERE e.event_id = ANY ($1::text[]);

-- name: FlowLockOfEvents
-- Before a transaction reads events to settle or redrive, it locks
-- their flows, in flow_id order, in one statement: the event rows it then
-- reads (the next statement, a new snapshot) cannot change until it ends,
-- since every writer of an event holds its flow's lock.
SELECT 1 FROM flow WHERE flow_id = ANY (ARRAY (SELECT flow_id FROM event WHERE event_id = ANY ($1::text[])))
ORDER BY flow_id FOR NO KEY UPDATE;

-- name: FlowLockOfEventsSkipLocked
-- FlowLockOfEvents of a settle that does not wait (TxHint.SkipHeld): the
-- flows another transaction holds (an open outbox transaction that
-- appended to them) are skipped; the flows it locked come back, and the
-- events of the others are left alone.
SELECT flow_id FROM flow WHERE flow_id = ANY (ARRAY (SELECT flow_id FROM event WHERE event_id = ANY ($1::text[])))
ORDER BY flow_id FOR NO KEY UPDATE SKIP LOCKED;


-- name: EventGetManyBySeq
-- The heads of flows a claim takes, by (flow_id, seq) pairs ($1, $2), when
-- the transaction has not read them yet.
SELECT /*event e o*/
FROM unnest($1::text[], $2::bigint[]) AS k (flow_id, seq)
JOIN event e ON e.flow_id = k.flow_id COLLATE "C" AND e.seq = k.seq
LEFT JOIN flow o ON o.flow_id = e.flow_id AND o.head_state_seq = e.seq
WHERE e.flow_id = ANY ($1::text[]);

-- name: FlowGetManyUnlocked
-- Prefetch of an enqueue: its flows, not locked. The enqueue lane is the
-- one writer of seq, so the seq read is exact; the columns the other lanes
-- write are settled at the write (FlowAppendMany).
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, head_state_seq FROM flow WHERE flow_id = ANY ($1::text[]);

-- name: FlowLock
-- An enqueue locks the flows it appended to, in flow_id order, in one
-- statement, just before it writes them at its commit.
SELECT 1 FROM flow WHERE flow_id = ANY ($1::text[]) ORDER BY flow_id FOR NO KEY UPDATE;

-- name: FlowAppendMany
-- An enqueue's write of the flows it appended to: the new seq and, for a
-- flow whose events were all acked when the write runs (head_seq > seq,
-- read from the row as it is then, under the lock), the wake-up: its first
-- new event is the head, ready now. Evaluated on the row as the other lanes
-- left it, so a settle that acked the flow's last head meanwhile cannot
-- leave the flow asleep.
UPDATE flow SET seq = u.seq,
    runnable = CASE WHEN flow.head_seq > flow.seq THEN true ELSE flow.runnable END,
    wait_until = CASE WHEN flow.head_seq > flow.seq THEN NULL ELSE flow.wait_until END
FROM unnest($1::text[], $2::bigint[]) AS u (flow_id, seq)
WHERE flow.flow_id = ANY ($1::text[]) AND flow.flow_id = u.flow_id COLLATE "C";

-- name: EventGetManyWithFlowAndNext
-- EventGetManyWithFlow of SettleAndClaim, with the event behind each one
-- (the flow's next head once it is acked; the columns after has_next are
-- zero when there is none), which its claims are likely to take.
SELECT /*event e f*/,
       f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.head_state_seq,
       n.event_id IS NOT NULL, /*event? n f*/
FROM event e JOIN flow f ON f.flow_id = e.flow_id
LEFT JOIN event n ON n.flow_id = e.flow_id AND n.seq = e.seq + 1
WHERE e.event_id = ANY ($1::text[]);
