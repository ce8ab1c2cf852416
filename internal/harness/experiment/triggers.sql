-- Triggers of the SPEC §5 item 9 experiments: each makes one insert fail
-- inside the real transaction, so the experiment can show that nothing is
-- half-written and that the error reaches the caller. Never installed outside
-- the experiments' fresh files.

-- name: RejectEventInsert
CREATE TRIGGER experiment_reject_event BEFORE INSERT ON event
BEGIN SELECT RAISE(ABORT, 'fairrelay experiment: trigger rejects the write'); END;

-- name: RejectProjectionInsert
CREATE TRIGGER experiment_reject_projection_insert BEFORE INSERT ON projection
BEGIN SELECT RAISE(ABORT, 'fairrelay experiment: trigger rejects the write'); END;

-- name: RejectProjectionUpdate
CREATE TRIGGER experiment_reject_projection_update BEFORE UPDATE ON projection
BEGIN SELECT RAISE(ABORT, 'fairrelay experiment: trigger rejects the write'); END;

-- name: RejectAuditInsert
CREATE TRIGGER experiment_reject_audit BEFORE INSERT ON audit
BEGIN SELECT RAISE(ABORT, 'fairrelay experiment: trigger rejects the write'); END;
