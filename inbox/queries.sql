-- Queries of the inbox, shared by SQLite and PostgreSQL: placeholders are $n,
-- numbered in order of first appearance (SQLite binds them by position).

-- name: ReceiptGet
SELECT flow_id, seq, body, body_sha256 FROM receipt WHERE event_id = $1;

-- name: Ready
SELECT count(*) FROM receipt WHERE event_id = '';

-- name: ProjectionGet
SELECT seq, total FROM projection WHERE flow_id = $1;

-- name: ReceiptInsert
INSERT INTO receipt (event_id, flow_id, seq, body, body_sha256, received_ms) VALUES ($1, $2, $3, $4, $5, $6);

-- name: ProjectionUpsert
INSERT INTO projection (flow_id, seq, total) VALUES ($1, $2, $3)
ON CONFLICT (flow_id) DO UPDATE SET seq = excluded.seq, total = excluded.total;

-- name: ReceiptList
SELECT event_id, flow_id, seq FROM receipt ORDER BY flow_id, seq;

-- name: ProjectionList
SELECT flow_id, seq, total FROM projection ORDER BY flow_id;

-- name: ReceiptPage
SELECT event_id, flow_id, seq FROM receipt
WHERE flow_id > $1 OR (flow_id = $1 AND seq > $2)
ORDER BY flow_id, seq LIMIT $3;

-- name: ProjectionPage
SELECT flow_id, seq, total FROM projection WHERE flow_id > $1 ORDER BY flow_id LIMIT $2;

-- name: HeldInsert
INSERT INTO held (event_id, flow_id, seq, body, body_sha256, reason) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (event_id, body_sha256, flow_id, seq) DO NOTHING;

-- name: HeldReason
UPDATE held SET reason = $3 WHERE event_id = $1 AND body_sha256 = $2 AND flow_id = $4 AND seq = $5;

-- name: HeldCandidates
SELECT event_id, body, body_sha256 FROM held WHERE flow_id = $1 AND seq = $2 ORDER BY event_id, body_sha256;

-- name: HeldDeleteOne
DELETE FROM held WHERE event_id = $1 AND body_sha256 = $2 AND flow_id = $3 AND seq = $4;

-- name: HeldDeleteApplied
DELETE FROM held
WHERE flow_id = $1 AND seq <= $2
  AND EXISTS (SELECT 1 FROM receipt r WHERE r.event_id = held.event_id AND r.flow_id = held.flow_id
                                        AND r.seq = held.seq
                                        AND (r.body_sha256 = held.body_sha256
                                             OR (r.body_sha256 IS NULL AND r.body = held.body)));

-- name: HeldAhead
SELECT EXISTS (SELECT 1 FROM held WHERE flow_id = $1 AND seq > $2);

-- name: HeldFlows
SELECT DISTINCT flow_id FROM held WHERE flow_id > $1 ORDER BY flow_id LIMIT $2;

-- name: HeldCount
SELECT count(*) FROM held;

-- name: HeldDropSuperseded
DELETE FROM held WHERE seq <= coalesce((SELECT p.seq FROM projection p WHERE p.flow_id = held.flow_id), 0);

-- name: HeldCounts
SELECT coalesce(sum(CASE WHEN h.seq > coalesce(p.seq, 0) THEN 1 ELSE 0 END), 0),
       coalesce(sum(CASE WHEN h.seq > coalesce(p.seq, 0) THEN 0 ELSE 1 END), 0)
FROM held h LEFT JOIN projection p ON p.flow_id = h.flow_id;

-- name: HeldPage
SELECT h.event_id, h.flow_id, h.seq, min(h.reason),
       CASE WHEN h.seq > coalesce(max(p.seq), 0) THEN 'waiting' ELSE 'superseded' END
FROM held h LEFT JOIN projection p ON p.flow_id = h.flow_id
WHERE h.flow_id > $1 OR (h.flow_id = $1 AND h.seq > $2)
GROUP BY h.flow_id, h.seq, h.event_id
ORDER BY h.flow_id, h.seq, h.event_id LIMIT $3;

-- name: HeldPageRest
SELECT h.event_id, h.flow_id, h.seq, min(h.reason),
       CASE WHEN h.seq > coalesce(max(p.seq), 0) THEN 'waiting' ELSE 'superseded' END
FROM held h LEFT JOIN projection p ON p.flow_id = h.flow_id
WHERE h.flow_id = $1 AND h.seq = $2 AND h.event_id > $3
GROUP BY h.flow_id, h.seq, h.event_id
ORDER BY h.event_id;

-- name: ReceiptIDAt
SELECT event_id FROM receipt WHERE flow_id = $1 AND seq = $2;

-- name: WaiverGet
SELECT event_id FROM waiver WHERE flow_id = $1 AND seq = $2;

-- name: WaiverElsewhere
SELECT 1 FROM waiver WHERE event_id = $1 AND NOT (flow_id = $2 AND seq = $3) LIMIT 1;

-- name: WaiverInsert
INSERT INTO waiver (flow_id, seq, event_id, reason, operator, waived_at) VALUES ($1, $2, $3, $4, $5, $6);

-- name: WaiverPage
SELECT flow_id, seq, event_id, reason, operator, waived_at FROM waiver
WHERE flow_id > $1 OR (flow_id = $1 AND seq > $2)
ORDER BY flow_id, seq LIMIT $3;

-- name: HeldIDsAt
SELECT DISTINCT event_id FROM held WHERE flow_id = $1 AND seq = $2 ORDER BY event_id;

-- name: HeldSeqOf
SELECT seq FROM held WHERE flow_id = $1 AND event_id = $2 ORDER BY seq LIMIT 1;

-- name: HeldDeleteWaived
DELETE FROM held WHERE flow_id = $1 AND seq = $2 AND event_id = $3;

-- name: ReceiptEpoch
SELECT migrated_ms FROM receipt_epoch WHERE id = 1;

-- name: ReceiptPruneUndated
DELETE FROM receipt WHERE event_id IN (SELECT event_id FROM receipt WHERE received_ms IS NULL LIMIT $1);

-- name: ReceiptPruneBefore
DELETE FROM receipt WHERE event_id IN (
    SELECT event_id FROM receipt WHERE received_ms < $1 ORDER BY received_ms LIMIT $2);
