-- Queries of the PostgreSQL queue store. Each block starts with "-- name: X"
-- and is one statement; pgstore.go loads them by name at init. Tables are
-- unqualified: the store's schema is first on the connection's search_path.
-- Events are read through the view event_now (migration 005), which applies
-- a flow's head state (migration 004).

-- name: ClockGet
-- The clock of SPEC §2: the largest tick any write recorded (the lane rows,
-- and the flows enqueues wrote, migration 005), the claim lane's ticket.
SELECT tick, ticket FROM stored_clock;

-- name: ClockLock
-- Writers of a lane queue on a transaction-scoped advisory lock of the
-- store's schema and lane before they lock their lane's clock row ($1: the
-- clock row ids of the transaction's lanes, ascending, so that a
-- transaction holding two lanes takes them in the same order as every
-- other): the lock manager wakes them one at a time, where waiters on a row
-- lock all wake at each commit and fight for the row again (a convoy that
-- collapses throughput with dozens of claimers). The row lock of
-- ClockGetForUpdate stays: it is what serialises a writer that skipped this
-- lock.
SELECT pg_advisory_xact_lock(1718186353 + l, hashtext(current_schema())) FROM unnest($1::integer[]) AS l;

-- name: ClockGetForUpdate
-- Every write transaction locks its lanes' clock rows first ($1): the
-- writers of a lane are serialised on it, which gives the lane exactly
-- SQLite's one-writer answers (SPEC §4: the same answers). Under READ
-- COMMITTED each later statement then sees every commit made before the
-- lock was granted. The other rows are read as last committed.
-- The earliest wait_until comes along (flow_waiting's first entry): while
-- it lies after the transaction's tick, no flow is due and the due index
-- needs no read. (count(*) reads every row of "mine", so each of them is
-- locked.)
WITH mine AS MATERIALIZED (SELECT id FROM clock WHERE id = ANY ($1::integer[]) ORDER BY id FOR UPDATE)
SELECT s.tick, s.ticket, (SELECT min(wait_until) FROM flow WHERE wait_until IS NOT NULL)
FROM stored_clock s, (SELECT count(*) FROM mine) AS locked;

-- name: ClockSet
-- A writer sets its own lanes' rows ($3): the tick, and the ticket on the
-- claim lane's row.
UPDATE clock SET tick = $1, ticket = CASE WHEN id = 1 THEN $2 ELSE ticket END
WHERE id = ANY ($3::integer[]);

-- name: SettingsGet
SELECT entry FROM settings WHERE id = 1;

-- name: SettingsSetEntry
UPDATE settings SET entry = $1 WHERE id = 1 AND entry IS NULL;

-- name: FlowLockOfEvents
-- Before a transaction reads events to settle or redrive, it locks their
-- flows, in flow_id order, in one statement: the event rows it then reads
-- (a later statement, a new snapshot) cannot change until it ends, since
-- every writer of an event holds its flow's lock.
SELECT 1 FROM flow WHERE flow_id = ANY (ARRAY (SELECT flow_id FROM event WHERE event_id = ANY ($1::text[])))
ORDER BY flow_id FOR NO KEY UPDATE;

-- name: FlowLockOfEventsSkipLocked
-- FlowLockOfEvents of a settle that does not wait (ReadSet.SkipHeld): the
-- flows another transaction holds (an open outbox transaction that
-- appended to them) are skipped; the flows it locked come back, and the
-- events of the others are left alone.
SELECT flow_id FROM flow WHERE flow_id = ANY (ARRAY (SELECT flow_id FROM event WHERE event_id = ANY ($1::text[])))
ORDER BY flow_id FOR NO KEY UPDATE SKIP LOCKED;

-- name: FlowLock
-- Before a transaction reads the flows an operator action names (pause,
-- resume), it locks them, in flow_id order, in one statement, before its
-- lanes, as a settle locks its events' flows (FlowLockOfEvents): a flow an
-- open outbox transaction holds then holds up this action alone, not every
-- settle queued behind it on the lane; and FlowsWithHeads, a later
-- statement with a new snapshot, reads the flows and their heads as they
-- stand once locked (in one statement a waited-for flow row is read anew
-- but the head joined to it is not: a head the outbox appended was missed).
SELECT 1 FROM flow WHERE flow_id = ANY ($1::text[]) ORDER BY flow_id FOR NO KEY UPDATE;

-- name: EventsWithFlows
-- The events a settle or redrive names, with their flows (after
-- FlowLockOfEvents) and, when $2, the event behind each (the flow's next
-- head once it is acked; has_next is false when there is none).
SELECT e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by,
       f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.head_state_seq, f.paused, f.paused_by, f.paused_reason, f.paused_at, f.group_id,
       n.event_id IS NOT NULL, n.event_id, n.flow_id, n.seq, n.body, n.state, n.generation, n.attempts, n.lifetime_attempts, n.reason, n.next_at, n.lease_until, n.enqueued_at, n.claimed_wall, n.acked_at, n.claimed_by
FROM event_now e JOIN flow f ON f.flow_id = e.flow_id
LEFT JOIN event_now n ON $2 AND n.flow_id = e.flow_id AND n.seq = e.seq + 1
WHERE e.event_id = ANY ($1::text[]);

-- name: PickSeed
-- The first $1 runnable flows in the seed policy's dispatch order (SPEC §2
-- step 3), with their heads (has_head false when the head row is missing,
-- which the protocol reports as an inconsistent store). The flows stay
-- locked; one another transaction holds (an enqueue appending to it) is
-- skipped, never waited for. The last column, fresh, is false when the row
-- was locked in a newer version than the statement's snapshot holds:
-- another transaction changed the flow (a settle moved its head, a claim
-- took it and its lease ran out) and committed after the statement began,
-- and PostgreSQL's re-check of a locked row re-reads that row alone — the
-- head joined to it is the snapshot's, of another seq or another
-- generation. The reader then reads such a flow's head again, in a new
-- statement, under the lock it now holds (Tx.refresh). Every query below
-- that locks flows with their heads has the column.
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.head_state_seq, f.paused, f.paused_by, f.paused_reason, f.paused_at, f.group_id,
       e.event_id IS NOT NULL, e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by,
       f.ctid = (SELECT x.ctid FROM flow x WHERE x.flow_id = f.flow_id)
FROM flow f LEFT JOIN event_now e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.runnable AND f.group_id IS NULL ORDER BY f.served, f.flow_id LIMIT $1
FOR NO KEY UPDATE OF f SKIP LOCKED;

-- name: PickFair
-- PickSeed in the fair policy's order (SPEC §7).
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.head_state_seq, f.paused, f.paused_by, f.paused_reason, f.paused_at, f.group_id,
       e.event_id IS NOT NULL, e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by,
       f.ctid = (SELECT x.ctid FROM flow x WHERE x.flow_id = f.flow_id)
FROM flow f LEFT JOIN event_now e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.runnable AND f.group_id IS NULL ORDER BY f.served, f.ord LIMIT $1
FOR NO KEY UPDATE OF f SKIP LOCKED;

-- name: Due
-- The due index: flows whose wait_until has come by max($1, the stored
-- tick), after the key ($2, $3), with their heads, locked; a flow another
-- transaction holds (a settle of its head, an enqueue) is skipped, never
-- waited for, and is due again at the next claim.
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.head_state_seq, f.paused, f.paused_by, f.paused_reason, f.paused_at, f.group_id,
       e.event_id IS NOT NULL, e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by,
       f.ctid = (SELECT x.ctid FROM flow x WHERE x.flow_id = f.flow_id)
FROM flow f LEFT JOIN event_now e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.wait_until IS NOT NULL AND f.wait_until <= greatest($1, (SELECT tick FROM stored_clock))
  AND (f.wait_until, f.flow_id) > ($2, $3)
ORDER BY f.wait_until, f.flow_id LIMIT $4
FOR NO KEY UPDATE OF f SKIP LOCKED;

-- name: PickSeedRead
-- PickSeed of a read transaction: nothing is locked.
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.head_state_seq, f.paused, f.paused_by, f.paused_reason, f.paused_at, f.group_id,
       e.event_id IS NOT NULL, e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by
FROM flow f LEFT JOIN event_now e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.runnable AND f.group_id IS NULL ORDER BY f.served, f.flow_id LIMIT $1;

-- name: PickFairRead
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.head_state_seq, f.paused, f.paused_by, f.paused_reason, f.paused_at, f.group_id,
       e.event_id IS NOT NULL, e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by
FROM flow f LEFT JOIN event_now e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.runnable AND f.group_id IS NULL ORDER BY f.served, f.ord LIMIT $1;

-- name: NextWait
SELECT min(wait_until) FROM flow WHERE wait_until IS NOT NULL;

-- name: FlowList
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, head_state_seq, paused, paused_by, paused_reason, paused_at, group_id FROM flow
WHERE flow_id > $1 ORDER BY flow_id LIMIT $2;

-- name: EventGet
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at, claimed_wall, acked_at, claimed_by
FROM event_now WHERE event_id = $1;

-- name: TombstoneRead
SELECT flow_id, seq, acked_at FROM tombstone WHERE event_id = $1;

-- name: EventsAt
-- Events by (flow_id, seq) pairs ($1, $2): the heads of listed flows.
SELECT e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by
FROM unnest($1::text[], $2::bigint[]) AS k (flow_id, seq)
JOIN event_now e ON e.flow_id = k.flow_id COLLATE "C" AND e.seq = k.seq
WHERE e.flow_id = ANY ($1::text[]);

-- name: EventList
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at, claimed_wall, acked_at, claimed_by
FROM event_now WHERE (flow_id, seq) > ($1, $2) ORDER BY flow_id, seq LIMIT $3;

-- name: QuarantinedList
-- Quarantined events are heads of parked flows (migration 002; parked is
-- a stored generated column since 013): read them through the partial
-- index flow_parked_head, one per flow at most. $5 is
-- a prefix's start ('' for none); QuarantinedRange adds its end $6, so
-- that the index is read as a range. $6 ($7 in QuarantinedRange) is a
-- group ('' for any): a flow without group_id is in the group named like
-- itself.
SELECT e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by
FROM flow f JOIN event_now e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.parked
  AND e.state = 'quarantined' AND f.flow_id > $1 AND ($3 = '' OR f.flow_id = $3) AND ($4 = '' OR e.reason = $4)
  AND f.flow_id >= $5
  AND ($6 = '' OR coalesce(f.group_id, f.flow_id) = $6)
ORDER BY f.flow_id LIMIT $2;

-- name: QuarantinedRange
SELECT e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by
FROM flow f JOIN event_now e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.parked
  AND e.state = 'quarantined' AND f.flow_id > $1 AND ($3 = '' OR f.flow_id = $3) AND ($4 = '' OR e.reason = $4)
  AND f.flow_id >= $5 AND f.flow_id < $6
  AND ($7 = '' OR coalesce(f.group_id, f.flow_id) = $7)
ORDER BY f.flow_id LIMIT $2;

-- name: AuditList
SELECT no, event_id, flow_id, action, reason, operator, previous_reason, generation, at, wall FROM audit WHERE no > $1 ORDER BY no LIMIT $2;

-- name: AttemptList
SELECT event_id, generation, flow_id, lease_until, claimed_wall, settled_at, settled_wall, outcome, status, detail, duration_ms, relay
FROM attempt WHERE event_id = $1 ORDER BY generation;

-- name: FlowsWithHeads
-- The flows an operator action names ($1), locked in flow_id order, with
-- their heads.
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.head_state_seq, f.paused, f.paused_by, f.paused_reason, f.paused_at, f.group_id,
       e.event_id IS NOT NULL, e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by,
       f.ctid = (SELECT x.ctid FROM flow x WHERE x.flow_id = f.flow_id)
FROM flow f LEFT JOIN event_now e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.flow_id = ANY ($1::text[]) ORDER BY f.flow_id
FOR NO KEY UPDATE OF f;

-- name: TableExists
-- The table's name when it exists in the connection's schema, else NULL.
SELECT to_regclass($1)::text;

-- name: CurrentSchema
SELECT current_schema();

-- The set-based writes of a write transaction, one statement per kind of
-- row, sent with the commit (see writeSet).

-- name: AuditInsert
INSERT INTO audit (event_id, flow_id, action, reason, operator, previous_reason, generation, at, wall) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9);

-- name: AttemptInsertMany
-- The first word on an attempt wins: a settle's answer, or the lease found
-- run out, whichever is recorded first.
INSERT INTO attempt (event_id, generation, flow_id, lease_until, claimed_wall, settled_at, settled_wall, outcome, status, detail, duration_ms, relay)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::text[], $9::text[], $10::text[], $11::bigint[], $12::text[])
ON CONFLICT (event_id, generation) DO NOTHING;

-- name: FlowUpdateMany
-- "flow_id = ANY" as well as the join: the planner then finds the rows
-- through the primary key whatever it guesses of unnest's size (without it,
-- it hashes a sequential scan of the whole table once the batch is large).
-- The head state (migration 004): $11.. are the columns of the event the
-- transaction keeps there, $11 its seq; where $11 is NULL the flow keeps the
-- head state it has. FlowFlushHeadState runs first.
UPDATE flow SET seq = u.seq, served = u.served, head_seq = u.head_seq, runnable = u.runnable, wait_until = u.wait_until,
    paused = u.paused, paused_by = u.paused_by, paused_reason = u.paused_reason, paused_at = u.paused_at,
    head_state_seq = CASE WHEN u.hs_seq IS NULL THEN flow.head_state_seq ELSE u.hs_seq END,
    head_state = CASE WHEN u.hs_seq IS NULL THEN flow.head_state ELSE u.hs_state END,
    head_generation = CASE WHEN u.hs_seq IS NULL THEN flow.head_generation ELSE u.hs_generation END,
    head_attempts = CASE WHEN u.hs_seq IS NULL THEN flow.head_attempts ELSE u.hs_attempts END,
    head_lifetime_attempts = CASE WHEN u.hs_seq IS NULL THEN flow.head_lifetime_attempts ELSE u.hs_lifetime_attempts END,
    head_reason = CASE WHEN u.hs_seq IS NULL THEN flow.head_reason ELSE u.hs_reason END,
    head_next_at = CASE WHEN u.hs_seq IS NULL THEN flow.head_next_at ELSE u.hs_next_at END,
    head_lease_until = CASE WHEN u.hs_seq IS NULL THEN flow.head_lease_until ELSE u.hs_lease_until END,
    head_claimed_wall = CASE WHEN u.hs_seq IS NULL THEN flow.head_claimed_wall ELSE u.hs_claimed_wall END,
    head_acked_at = CASE WHEN u.hs_seq IS NULL THEN flow.head_acked_at ELSE u.hs_acked_at END,
    head_claimed_by = CASE WHEN u.hs_seq IS NULL THEN flow.head_claimed_by ELSE u.hs_claimed_by END
FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::boolean[], $6::bigint[],
            $7::boolean[], $8::text[], $9::text[], $10::bigint[],
            $11::bigint[], $12::text[], $13::bigint[], $14::bigint[], $15::bigint[], $16::text[], $17::bigint[], $18::bigint[],
            $19::bigint[], $20::bigint[], $21::text[])
    AS u (flow_id, seq, served, head_seq, runnable, wait_until,
          paused, paused_by, paused_reason, paused_at,
          hs_seq, hs_state, hs_generation, hs_attempts, hs_lifetime_attempts, hs_reason, hs_next_at, hs_lease_until,
          hs_claimed_wall, hs_acked_at, hs_claimed_by)
WHERE flow.flow_id = ANY ($1::text[]) AND flow.flow_id = u.flow_id COLLATE "C";

-- name: FlowFlushHeadState
-- Before flows ($1) take the head state of another event ($2, its seq):
-- the event whose state they hold now gets it back on its row (migration
-- 004), unless the transaction writes that row itself ($3: the events it
-- writes to their rows, after this statement).
UPDATE event SET own_state = f.head_state, generation = f.head_generation, attempts = f.head_attempts,
    lifetime_attempts = f.head_lifetime_attempts, reason = f.head_reason, next_at = f.head_next_at, lease_until = f.head_lease_until,
    claimed_wall = coalesce(f.head_claimed_wall, 0), acked_at = f.head_acked_at, claimed_by = coalesce(f.head_claimed_by, '')
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
    reason = u.reason, next_at = u.next_at, lease_until = u.lease_until, claimed_wall = u.claimed_wall, acked_at = u.acked_at,
    claimed_by = u.claimed_by
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[],
            $11::text[])
    AS u (event_id, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, claimed_wall, acked_at, claimed_by)
WHERE event.event_id = ANY ($1::text[]) AND event.event_id = u.event_id COLLATE "C";

-- name: GroupPickSeed
-- The first $1 groups of the group runnable index in the seed policy's
-- order (SPEC §8), each with its first runnable member flow and its head,
-- locked; a member another transaction holds is skipped. A group whose
-- runnable members are all held comes back without one (has_first false),
-- so that a full page says the index may hold more.
SELECT g.group_id, g.ord, g.served, g.weight, g.credit, g.runnable_flows,
       m.m_flow IS NOT NULL, coalesce(m.m_flow, ''), coalesce(m.m_ord, 0), coalesce(m.m_seq, 0), coalesce(m.m_served, 0), coalesce(m.m_head_seq, 0), coalesce(m.m_runnable, false), m.m_wait, m.m_hs, coalesce(m.m_paused, false), m.m_paused_by, m.m_paused_reason, m.m_paused_at, m.m_group,
       coalesce(m.m_has, false), m.e_id, m.e_flow, m.e_seq, m.e_body, m.e_state, m.e_gen, m.e_att, m.e_life, m.e_reason, m.e_next, m.e_lease, m.e_enq, m.e_claimed, m.e_acked, m.e_claimed_by, coalesce(m.m_fresh, true)
FROM (SELECT * FROM grp WHERE runnable_flows > 0 ORDER BY served, group_id LIMIT $1) g
LEFT JOIN LATERAL (
    SELECT f.flow_id AS m_flow, f.ord AS m_ord, f.seq AS m_seq, f.served AS m_served, f.head_seq AS m_head_seq, f.runnable AS m_runnable, f.wait_until AS m_wait, f.head_state_seq AS m_hs, f.paused AS m_paused, f.paused_by AS m_paused_by, f.paused_reason AS m_paused_reason, f.paused_at AS m_paused_at, f.group_id AS m_group,
           e.event_id IS NOT NULL AS m_has, e.event_id AS e_id, e.flow_id AS e_flow, e.seq AS e_seq, e.body AS e_body, e.state AS e_state, e.generation AS e_gen, e.attempts AS e_att, e.lifetime_attempts AS e_life, e.reason AS e_reason, e.next_at AS e_next, e.lease_until AS e_lease, e.enqueued_at AS e_enq, e.claimed_wall AS e_claimed, e.acked_at AS e_acked, e.claimed_by AS e_claimed_by,
           f.ctid = (SELECT x.ctid FROM flow x WHERE x.flow_id = f.flow_id) AS m_fresh
    FROM flow f LEFT JOIN event_now e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
    WHERE f.runnable AND f.group_id = g.group_id ORDER BY f.served, f.flow_id LIMIT 1
    FOR NO KEY UPDATE OF f SKIP LOCKED) m ON true
ORDER BY g.served, g.group_id;

-- name: GroupPickFair
-- GroupPickSeed in the fair policy's order.
SELECT g.group_id, g.ord, g.served, g.weight, g.credit, g.runnable_flows,
       m.m_flow IS NOT NULL, coalesce(m.m_flow, ''), coalesce(m.m_ord, 0), coalesce(m.m_seq, 0), coalesce(m.m_served, 0), coalesce(m.m_head_seq, 0), coalesce(m.m_runnable, false), m.m_wait, m.m_hs, coalesce(m.m_paused, false), m.m_paused_by, m.m_paused_reason, m.m_paused_at, m.m_group,
       coalesce(m.m_has, false), m.e_id, m.e_flow, m.e_seq, m.e_body, m.e_state, m.e_gen, m.e_att, m.e_life, m.e_reason, m.e_next, m.e_lease, m.e_enq, m.e_claimed, m.e_acked, m.e_claimed_by, coalesce(m.m_fresh, true)
FROM (SELECT * FROM grp WHERE runnable_flows > 0 ORDER BY served, ord LIMIT $1) g
LEFT JOIN LATERAL (
    SELECT f.flow_id AS m_flow, f.ord AS m_ord, f.seq AS m_seq, f.served AS m_served, f.head_seq AS m_head_seq, f.runnable AS m_runnable, f.wait_until AS m_wait, f.head_state_seq AS m_hs, f.paused AS m_paused, f.paused_by AS m_paused_by, f.paused_reason AS m_paused_reason, f.paused_at AS m_paused_at, f.group_id AS m_group,
           e.event_id IS NOT NULL AS m_has, e.event_id AS e_id, e.flow_id AS e_flow, e.seq AS e_seq, e.body AS e_body, e.state AS e_state, e.generation AS e_gen, e.attempts AS e_att, e.lifetime_attempts AS e_life, e.reason AS e_reason, e.next_at AS e_next, e.lease_until AS e_lease, e.enqueued_at AS e_enq, e.claimed_wall AS e_claimed, e.acked_at AS e_acked, e.claimed_by AS e_claimed_by,
           f.ctid = (SELECT x.ctid FROM flow x WHERE x.flow_id = f.flow_id) AS m_fresh
    FROM flow f LEFT JOIN event_now e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
    WHERE f.runnable AND f.group_id = g.group_id ORDER BY f.served, f.ord LIMIT 1
    FOR NO KEY UPDATE OF f SKIP LOCKED) m ON true
ORDER BY g.served, g.ord;

-- name: GroupPickSeedRead
SELECT g.group_id, g.ord, g.served, g.weight, g.credit, g.runnable_flows, 0::bigint FROM grp g WHERE g.runnable_flows > 0 ORDER BY g.served, g.group_id LIMIT $1;

-- name: GroupPickFairRead
SELECT g.group_id, g.ord, g.served, g.weight, g.credit, g.runnable_flows, 0::bigint FROM grp g WHERE g.runnable_flows > 0 ORDER BY g.served, g.ord LIMIT $1;

-- name: MembersSeed
-- A group's ($1) first $2 runnable member flows in the seed policy's order,
-- with heads, locked; one another transaction holds is skipped.
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.head_state_seq, f.paused, f.paused_by, f.paused_reason, f.paused_at, f.group_id,
       e.event_id IS NOT NULL, e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by,
       f.ctid = (SELECT x.ctid FROM flow x WHERE x.flow_id = f.flow_id)
FROM flow f LEFT JOIN event_now e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.runnable AND f.group_id = $1 ORDER BY f.served, f.flow_id LIMIT $2
FOR NO KEY UPDATE OF f SKIP LOCKED;

-- name: MembersFair
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.head_state_seq, f.paused, f.paused_by, f.paused_reason, f.paused_at, f.group_id,
       e.event_id IS NOT NULL, e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by,
       f.ctid = (SELECT x.ctid FROM flow x WHERE x.flow_id = f.flow_id)
FROM flow f LEFT JOIN event_now e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.runnable AND f.group_id = $1 ORDER BY f.served, f.ord LIMIT $2
FOR NO KEY UPDATE OF f SKIP LOCKED;

-- name: GroupsByName
SELECT g.group_id, g.ord, g.served, g.weight, g.credit, g.runnable_flows, coalesce(l.max_backlog, 0) FROM grp g LEFT JOIN grp_limit l ON l.group_id = g.group_id
WHERE g.group_id = ANY ($1::text[]);

-- name: GroupTurnMany
-- A claim's changes of groups: their turns (where turn) and their counts of
-- runnable members.
UPDATE grp SET served = CASE WHEN u.turn THEN u.served ELSE grp.served END,
    credit = CASE WHEN u.turn THEN u.credit ELSE grp.credit END,
    runnable_flows = grp.runnable_flows + u.delta
FROM unnest($1::text[], $2::boolean[], $3::bigint[], $4::bigint[], $5::bigint[]) AS u (group_id, turn, served, credit, delta)
WHERE grp.group_id = ANY ($1::text[]) AND grp.group_id = u.group_id COLLATE "C";

-- name: GroupAckedMany
-- The settle lane's count of acks by group (the backlog of SPEC §8's limits).
INSERT INTO grp_acked AS a (group_id, acked) SELECT * FROM unnest($1::text[], $2::bigint[])
ON CONFLICT (group_id) DO UPDATE SET acked = a.acked + excluded.acked;

-- name: ClockAcked
-- The settle lane's count of acks, on its clock row.
UPDATE clock SET acked = acked + $1 WHERE id = 3;

-- name: GroupList
-- A group's flow count and backlog in one pass over its flows (the lateral
-- subquery; two scalar subqueries read every member row twice and planned
-- past the JIT threshold: 330 against 70-100 ms for 1 000 groups of 100
-- flows, BENCHMARKS.md "The queue gauges").
SELECT g.group_id, g.ord, g.served, g.weight, g.credit, g.runnable_flows, coalesce(l.max_backlog, 0),
       m.flows, m.backlog, g.max_slots
FROM grp g LEFT JOIN grp_limit l ON l.group_id = g.group_id
  CROSS JOIN LATERAL (SELECT count(*) AS flows, coalesce(sum(f.seq - f.head_seq + 1), 0) AS backlog
                      FROM flow f WHERE f.group_id = g.group_id) m
WHERE g.group_id > $1 ORDER BY g.group_id LIMIT $2;

-- name: GroupQuarantined
-- The quarantined heads of the groups from $1 to $2 (a page of GroupList),
-- by group: the parked flows through flow_parked_head, with the head's
-- state read as Counts reads it; O(parked flows) whatever the groups' flow
-- counts. A group row sets the group_id of the flow named like it, so a
-- listed group's flows are its group_id rows.
SELECT f.group_id, count(*) FROM flow f
WHERE f.parked AND f.group_id >= $1 AND f.group_id <= $2
  AND CASE WHEN f.head_state_seq = f.head_seq THEN f.head_state
           ELSE (SELECT e.own_state FROM event e WHERE e.flow_id = f.flow_id AND e.seq = f.head_seq) END = 'quarantined'
GROUP BY f.group_id;

-- name: GroupSettings
-- The groups set apart from a new one's defaults, read from the group rows
-- alone (GroupList counts every member flow).
SELECT g.group_id, g.weight, coalesce(l.max_backlog, 0), g.max_slots
FROM grp g LEFT JOIN grp_limit l ON l.group_id = g.group_id
WHERE g.group_id > $1 AND (g.weight <> 1 OR g.max_slots > 0 OR l.max_backlog > 0)
ORDER BY g.group_id LIMIT $2;

-- name: SettingsLimits
SELECT max_backlog, max_flow_backlog FROM settings WHERE id = 1;

-- name: Backlog
-- The events not acked: every flow's seq - head_seq + 1 (a read view's
-- count, not the limits' counters, which exist only while a limit is set).
SELECT coalesce(sum(seq - head_seq + 1), 0) FROM flow;

-- name: FlowTotals
-- Backlog's sum and the flows, in the one pass over the flow table.
SELECT count(*), coalesce(sum(seq - head_seq + 1), 0) FROM flow;

-- name: FlowSearch
-- The flows whose id lies in [$1, $2) (a prefix's range) after $3: a range
-- of the primary key. FlowSearchOpen is the range without an end.
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, head_state_seq, paused, paused_by, paused_reason, paused_at, group_id FROM flow
WHERE flow_id >= $1 AND flow_id < $2 AND flow_id > $3 ORDER BY flow_id LIMIT $4;

-- name: FlowSearchOpen
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, head_state_seq, paused, paused_by, paused_reason, paused_at, group_id FROM flow
WHERE flow_id >= $1 AND flow_id > $2 ORDER BY flow_id LIMIT $3;

-- name: PausedList
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, head_state_seq, paused, paused_by, paused_reason, paused_at, group_id FROM flow
WHERE paused AND flow_id > $1 ORDER BY flow_id LIMIT $2;

-- name: Counts
-- Each count reads at most $1 entries: inflight heads through the due
-- index (an inflight head waits there for its lease's end) and, in a
-- paused flow, which leaves the due index (park_paused_flow), through
-- flow_parked_head (a breaker's report: a paused flow's inflight head was
-- counted nowhere, and the relay's gauges counted it ready); quarantined
-- heads through flow_parked_head (as QuarantinedList), paused flows
-- through flow_paused. A head's state is event_now's, read without the
-- view: the flow row's head state when it holds the head's (migration
-- 004), else the event row's own (the view joins the flow row a second
-- time: 19 ms against 4 for 2 000 quarantined heads).
SELECT least($1, (SELECT count(*) FROM (SELECT 1 FROM flow f WHERE f.wait_until IS NOT NULL
                              AND CASE WHEN f.head_state_seq = f.head_seq THEN f.head_state
                                       ELSE (SELECT e.own_state FROM event e WHERE e.flow_id = f.flow_id AND e.seq = f.head_seq) END = 'inflight'
                              LIMIT $1) i)
                 + (SELECT count(*) FROM (SELECT 1 FROM flow f WHERE f.parked AND f.paused
                              AND CASE WHEN f.head_state_seq = f.head_seq THEN f.head_state
                                       ELSE (SELECT e.own_state FROM event e WHERE e.flow_id = f.flow_id AND e.seq = f.head_seq) END = 'inflight'
                              LIMIT $1) ip)),
       (SELECT count(*) FROM (SELECT 1 FROM flow f WHERE f.parked
                              AND CASE WHEN f.head_state_seq = f.head_seq THEN f.head_state
                                       ELSE (SELECT e.own_state FROM event e WHERE e.flow_id = f.flow_id AND e.seq = f.head_seq) END = 'quarantined'
                              LIMIT $1) q),
       (SELECT count(*) FROM (SELECT 1 FROM flow WHERE paused LIMIT $1) p);

-- name: OldestWaiting
-- The first event row without an acked_at of its own (event_waiting) that
-- is at or after its flow's head: the oldest event not acked.
SELECT e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by
FROM event w JOIN flow f ON f.flow_id = w.flow_id JOIN event_now e ON e.event_id = w.event_id
WHERE w.acked_at IS NULL AND w.seq >= f.head_seq ORDER BY w.enqueued_at, w.event_id LIMIT 1;

-- name: SettledSince
SELECT event_id, generation, flow_id, lease_until, claimed_wall, settled_at, settled_wall, outcome, status, detail, duration_ms, relay
FROM attempt WHERE settled_wall IS NOT NULL AND settled_wall >= $1 ORDER BY settled_wall DESC LIMIT $2;
