-- Queries of the SQLite queue store. Each block starts with "-- name: X" and
-- is one statement; sqlitestore.go loads them by name at init and prepares
-- them on the write connection.

-- name: ClockGet
SELECT tick, ticket, flows, enqueued, acked FROM clock WHERE id = 1;

-- name: ClockSet
UPDATE clock SET tick = ?, ticket = ?, flows = ?, enqueued = ?, acked = ? WHERE id = 1;

-- name: SettingsGet
SELECT entry FROM settings WHERE id = 1;

-- name: SettingsSetEntry
UPDATE settings SET entry = ? WHERE id = 1;

-- name: FlowGet
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, paused, paused_by, paused_reason, paused_at, group_id FROM flow WHERE flow_id = ?;

-- name: FlowInsert
INSERT INTO flow (flow_id, ord, seq, served, head_seq, runnable, wait_until, group_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?);

-- name: FlowUpdate
UPDATE flow SET seq = ?, served = ?, head_seq = ?, runnable = ?, wait_until = ?,
    paused = ?, paused_by = ?, paused_reason = ?, paused_at = ?, group_id = ? WHERE flow_id = ?;

-- name: FlowUpdateKeepGroup
-- FlowUpdate of a flow whose group_id the write does not change. SQLite
-- rewrites the entry of every index on a column an UPDATE sets, changed or
-- not: leaving group_id out spares a member flow's entry in flow_group,
-- a page of it per flow (most of a grouped claim's dirty pages).
UPDATE flow SET seq = ?, served = ?, head_seq = ?, runnable = ?, wait_until = ?,
    paused = ?, paused_by = ?, paused_reason = ?, paused_at = ? WHERE flow_id = ?;

-- name: FlowPickSeed
-- The runnable index (flows that are their own group) in the seed policy's
-- dispatch order (SPEC §2 step 3), with each flow's head.
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.paused, f.paused_by, f.paused_reason, f.paused_at, f.group_id,
       e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by
FROM flow f INDEXED BY flow_runnable_seed LEFT JOIN event e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.runnable = 1 AND f.group_id IS NULL ORDER BY f.served, f.flow_id LIMIT ?;

-- name: FlowPickFair
-- The runnable index in the fair policy's dispatch order (SPEC §7).
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.paused, f.paused_by, f.paused_reason, f.paused_at, f.group_id,
       e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by
FROM flow f INDEXED BY flow_runnable_fair LEFT JOIN event e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.runnable = 1 AND f.group_id IS NULL ORDER BY f.served, f.ord LIMIT ?;

-- name: FlowDue
-- The due index: flows whose wait_until has come by ?1, after the key
-- (?2, ?3), with their heads.
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.paused, f.paused_by, f.paused_reason, f.paused_at, f.group_id,
       e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by
FROM flow f INDEXED BY flow_waiting LEFT JOIN event e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.wait_until IS NOT NULL AND f.wait_until <= ?1 AND (f.wait_until, f.flow_id) > (?2, ?3)
ORDER BY f.wait_until, f.flow_id LIMIT ?4;

-- name: MembersSeed
-- A group's runnable member flows in the seed policy's order, with heads.
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.paused, f.paused_by, f.paused_reason, f.paused_at, f.group_id,
       e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by
FROM flow f INDEXED BY flow_member_seed LEFT JOIN event e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.runnable = 1 AND f.group_id = ? ORDER BY f.served, f.flow_id LIMIT ?;

-- name: MembersFair
SELECT f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.paused, f.paused_by, f.paused_reason, f.paused_at, f.group_id,
       e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by
FROM flow f INDEXED BY flow_member_fair LEFT JOIN event e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
WHERE f.runnable = 1 AND f.group_id = ? ORDER BY f.served, f.ord LIMIT ?;

-- name: GroupPickSeed
-- The group runnable index in the seed policy's order (SPEC §8).
SELECT group_id, ord, served, weight, credit, runnable_flows, max_backlog, enqueued, acked
FROM grp INDEXED BY grp_runnable_seed WHERE runnable_flows > 0 ORDER BY served, group_id LIMIT ?;

-- name: GroupPickFair
SELECT group_id, ord, served, weight, credit, runnable_flows, max_backlog, enqueued, acked
FROM grp INDEXED BY grp_runnable_fair WHERE runnable_flows > 0 ORDER BY served, ord LIMIT ?;

-- name: GroupPickFirstSeed
-- GroupPickSeed with each group's first runnable member flow and its head,
-- in one statement.
SELECT g.group_id, g.ord, g.served, g.weight, g.credit, g.runnable_flows, g.max_backlog, g.enqueued, g.acked,
       f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.paused, f.paused_by, f.paused_reason, f.paused_at, f.group_id,
       e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by
FROM (SELECT * FROM grp INDEXED BY grp_runnable_seed WHERE runnable_flows > 0 ORDER BY served, group_id LIMIT ?) g
JOIN flow f ON f.flow_id = (SELECT m.flow_id FROM flow m INDEXED BY flow_member_seed
                            WHERE m.runnable = 1 AND m.group_id = g.group_id ORDER BY m.served, m.flow_id LIMIT 1)
LEFT JOIN event e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
ORDER BY g.served, g.group_id;

-- name: GroupPickFirstFair
SELECT g.group_id, g.ord, g.served, g.weight, g.credit, g.runnable_flows, g.max_backlog, g.enqueued, g.acked,
       f.flow_id, f.ord, f.seq, f.served, f.head_seq, f.runnable, f.wait_until, f.paused, f.paused_by, f.paused_reason, f.paused_at, f.group_id,
       e.event_id, e.flow_id, e.seq, e.body, e.state, e.generation, e.attempts, e.lifetime_attempts, e.reason, e.next_at, e.lease_until, e.enqueued_at, e.claimed_wall, e.acked_at, e.claimed_by
FROM (SELECT * FROM grp INDEXED BY grp_runnable_fair WHERE runnable_flows > 0 ORDER BY served, ord LIMIT ?) g
JOIN flow f ON f.flow_id = (SELECT m.flow_id FROM flow m INDEXED BY flow_member_fair
                            WHERE m.runnable = 1 AND m.group_id = g.group_id ORDER BY m.served, m.ord LIMIT 1)
LEFT JOIN event e ON e.flow_id = f.flow_id AND e.seq = f.head_seq
ORDER BY g.served, g.ord;

-- name: GroupGet
SELECT group_id, ord, served, weight, credit, runnable_flows, max_backlog, enqueued, acked FROM grp WHERE group_id = ?;

-- name: GroupGetMany
-- GroupGet of every group named in ?1, a JSON array of names: one statement
-- for the groups a claim lacks (those of the member flows a batch settled).
SELECT group_id, ord, served, weight, credit, runnable_flows, max_backlog, enqueued, acked FROM grp
WHERE group_id IN (SELECT value FROM json_each(?1));

-- name: GroupInsert
INSERT INTO grp (group_id, ord, served, weight, credit, runnable_flows, max_backlog, enqueued, acked) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: GroupUpdate
UPDATE grp SET ord = ?, served = ?, weight = ?, credit = ?, max_backlog = ?, enqueued = ? WHERE group_id = ?;

-- name: GroupSetMaxSlots
UPDATE grp SET max_slots = ? WHERE group_id = ?;

-- name: GroupTurn
-- A claim's change of a group: its turn (when ?1), its count of runnable
-- members, and its count of acked events (?6: the acks of the same
-- transaction, so that a group a batch settles and files again is one
-- UPDATE of its row, not two).
UPDATE grp SET served = CASE WHEN ?1 THEN ?2 ELSE served END, credit = CASE WHEN ?1 THEN ?3 ELSE credit END,
    runnable_flows = runnable_flows + ?4, acked = acked + ?6 WHERE group_id = ?5;

-- name: GroupRunnable
UPDATE grp SET runnable_flows = runnable_flows + ? WHERE group_id = ?;

-- name: GroupAcked
UPDATE grp SET acked = acked + ? WHERE group_id = ?;

-- name: GroupList
SELECT g.group_id, g.ord, g.served, g.weight, g.credit, g.runnable_flows, g.max_backlog, g.enqueued, g.acked,
       (SELECT count(*) FROM flow f WHERE f.group_id = g.group_id), g.max_slots
FROM grp g WHERE g.group_id > ? ORDER BY g.group_id LIMIT ?;

-- name: GroupQuarantined
-- The quarantined heads of the groups from ?1 to ?2 (a page of GroupList),
-- by group: one pass over the partial index event_quarantined, O(quarantined
-- heads) whatever the groups' flow counts. A flow created without a group
-- has group_id NULL only while its group has no row (a group row, made by a
-- flow joining it or by configure, sets it), so a listed group's flows are
-- its group_id rows.
SELECT f.group_id, count(*) FROM event e INDEXED BY event_quarantined JOIN flow f ON f.flow_id = e.flow_id
WHERE e.state = 'quarantined' AND f.group_id >= ?1 AND f.group_id <= ?2
GROUP BY f.group_id;

-- name: GroupSettings
-- The groups set apart from a new one's defaults, read from the group rows
-- alone (GroupList counts every member flow).
SELECT group_id, weight, max_backlog, max_slots FROM grp
WHERE group_id > ? AND (weight <> 1 OR max_slots > 0 OR max_backlog > 0)
ORDER BY group_id LIMIT ?;

-- name: SettingsLimits
SELECT max_backlog, max_flow_backlog FROM settings WHERE id = 1;

-- name: SettingsSetLimits
UPDATE settings SET max_backlog = ?, max_flow_backlog = ? WHERE id = 1;

-- name: TombstoneGet
SELECT flow_id, seq, body_sha256 FROM tombstone WHERE event_id = ?;

-- name: TombstoneInsert
INSERT INTO tombstone (event_id, flow_id, seq, body_sha256, acked_at, claimed_wall) VALUES (?, ?, ?, ?, ?, ?);

-- name: TombstonePrune
-- Of the oldest tombstones acked before ?1, at most ?2, those the wall
-- clock does not hold: their event last claimed before ?3
-- (PruneParams.IDsWallBefore; the largest integer when no wall clock is
-- asked) or after ?4 (WallNow: a clock ahead of the pruner's). A batch read
-- in tick order, never a scan past it. A tombstone whose claimed_wall is
-- not known (0: written before migration 007) is dated by tombstone_epoch:
-- the migration's wall time less its age in ticks then.
DELETE FROM tombstone WHERE event_id IN
    (SELECT event_id FROM (SELECT event_id, CASE WHEN claimed_wall <> 0 THEN claimed_wall
                 ELSE coalesce((SELECT migrated_ms - (migrated_tick - acked_at) FROM tombstone_epoch), 0) END AS wall
                           FROM tombstone WHERE acked_at < ?1 ORDER BY acked_at LIMIT ?2)
     WHERE wall < ?3 OR wall > ?4);

-- name: TombstoneWallKept
-- How many of TombstonePrune's batch the wall clock holds (read before it).
SELECT count(*) FROM (SELECT CASE WHEN claimed_wall <> 0 THEN claimed_wall
                 ELSE coalesce((SELECT migrated_ms - (migrated_tick - acked_at) FROM tombstone_epoch), 0) END AS wall
                      FROM tombstone WHERE acked_at < ?1 ORDER BY acked_at LIMIT ?2)
WHERE wall >= ?3 AND wall <= ?4;

-- name: AckedBefore
-- The oldest acked events acked before ?1, at most ?2, with their bodies
-- and the wall-clock time of their last claim.
SELECT event_id, flow_id, seq, body, acked_at, claimed_wall FROM event INDEXED BY event_acked
WHERE acked_at IS NOT NULL AND acked_at < ?1 ORDER BY acked_at LIMIT ?2;

-- name: EventDelete
DELETE FROM event WHERE event_id = ?;

-- name: FlowNextWait
SELECT min(wait_until) FROM flow WHERE wait_until IS NOT NULL;

-- name: FlowList
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, paused, paused_by, paused_reason, paused_at, group_id FROM flow
WHERE flow_id > ? ORDER BY flow_id LIMIT ?;

-- name: EventGet
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at, claimed_wall, acked_at, claimed_by
FROM event WHERE event_id = ?;

-- name: TombstoneRead
SELECT flow_id, seq, acked_at FROM tombstone WHERE event_id = ?;

-- name: EventGetBySeq
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at, claimed_wall, acked_at, claimed_by
FROM event WHERE flow_id = ? AND seq = ?;

-- name: EventInsert
INSERT INTO event (event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: EventUpdate
UPDATE event SET state = ?, generation = ?, attempts = ?, lifetime_attempts = ?, reason = ?, next_at = ?, lease_until = ?,
    claimed_wall = ?, acked_at = ?, claimed_by = ?
WHERE event_id = ?;

-- name: EventList
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at, claimed_wall, acked_at, claimed_by
FROM event WHERE (flow_id, seq) > (?, ?) ORDER BY flow_id, seq LIMIT ?;

-- name: QuarantinedList
-- The literal state lets SQLite use the partial index event_quarantined; a
-- quarantined event is its flow's head, one per flow at most. ?5 is a
-- prefix's start ('' for none); QuarantinedRange adds its end ?6, so that
-- the index is read as a range. ?6 (?7 in QuarantinedRange) is a group
-- ('' for any): a flow without group_id is in the group named like itself.
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at, claimed_wall, acked_at, claimed_by
FROM event WHERE state = 'quarantined' AND flow_id > ?1 AND (?3 = '' OR flow_id = ?3) AND (?4 = '' OR reason = ?4)
  AND flow_id >= ?5
  AND (?6 = '' OR coalesce((SELECT f.group_id FROM flow f WHERE f.flow_id = event.flow_id), event.flow_id) = ?6)
ORDER BY flow_id, seq LIMIT ?2;

-- name: QuarantinedRange
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at, claimed_wall, acked_at, claimed_by
FROM event WHERE state = 'quarantined' AND flow_id > ?1 AND (?3 = '' OR flow_id = ?3) AND (?4 = '' OR reason = ?4)
  AND flow_id >= ?5 AND flow_id < ?6
  AND (?7 = '' OR coalesce((SELECT f.group_id FROM flow f WHERE f.flow_id = event.flow_id), event.flow_id) = ?7)
ORDER BY flow_id, seq LIMIT ?2;

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

-- name: FlowSearch
-- The flows whose id lies in [?1, ?2) (a prefix's range) after ?3: a range
-- of the primary key. FlowSearchOpen is the range without an end.
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, paused, paused_by, paused_reason, paused_at, group_id FROM flow
WHERE flow_id >= ?1 AND flow_id < ?2 AND flow_id > ?3 ORDER BY flow_id LIMIT ?4;

-- name: FlowSearchOpen
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, paused, paused_by, paused_reason, paused_at, group_id FROM flow
WHERE flow_id >= ?1 AND flow_id > ?2 ORDER BY flow_id LIMIT ?3;

-- name: PausedList
SELECT flow_id, ord, seq, served, head_seq, runnable, wait_until, paused, paused_by, paused_reason, paused_at, group_id FROM flow INDEXED BY flow_paused
WHERE paused = 1 AND flow_id > ? ORDER BY flow_id LIMIT ?;

-- name: FlowCount
SELECT count(*) FROM flow;

-- name: Counts
-- Each count reads at most ?1 entries of its partial index.
SELECT (SELECT count(*) FROM (SELECT 1 FROM event INDEXED BY event_inflight WHERE state = 'inflight' LIMIT ?1)),
       (SELECT count(*) FROM (SELECT 1 FROM event INDEXED BY event_quarantined WHERE state = 'quarantined' LIMIT ?1)),
       (SELECT count(*) FROM (SELECT 1 FROM flow INDEXED BY flow_paused WHERE paused = 1 LIMIT ?1));

-- name: OldestWaiting
SELECT event_id, flow_id, seq, body, state, generation, attempts, lifetime_attempts, reason, next_at, lease_until, enqueued_at, claimed_wall, acked_at, claimed_by
FROM event INDEXED BY event_waiting WHERE acked_at IS NULL ORDER BY enqueued_at, event_id LIMIT 1;

-- name: SettledSince
SELECT event_id, generation, flow_id, lease_until, claimed_wall, settled_at, settled_wall, outcome, status, detail, duration_ms, relay
FROM attempt INDEXED BY attempt_settled WHERE settled_wall IS NOT NULL AND settled_wall >= ? ORDER BY settled_wall DESC LIMIT ?;
