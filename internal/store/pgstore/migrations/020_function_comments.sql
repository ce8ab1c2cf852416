-- 020: the schema's functions say which are for callers. A user listing
-- them (\df+ in psql) saw enqueue_events, lock_name, ident_problem and
-- park_paused_flow beside enqueue and enqueue_many with nothing to tell
-- them apart (a fresh user's report); the internal ones skip the checks
-- (the clock, the fields, the limits) that the two public ones make.
COMMENT ON FUNCTION enqueue(TEXT, TEXT, BYTEA, BIGINT, TEXT) IS
    'fairrelay outbox: enqueue one event in the caller''s transaction (docs/outbox.md); answers status, seq, tick, limit';
COMMENT ON FUNCTION enqueue_many(TEXT[], TEXT[], BYTEA[], BIGINT, BOOLEAN, BIGINT, INTEGER, TEXT[]) IS
    'fairrelay outbox: enqueue a batch at one tick in the caller''s transaction (docs/outbox.md); one answer row per event';
COMMENT ON FUNCTION enqueue_events(TEXT[], TEXT[], BYTEA[], TEXT[], BIGINT, BIGINT, BIGINT, BIGINT) IS
    'fairrelay internal: not for callers (it skips the clock, field and limit checks); call enqueue or enqueue_many';
COMMENT ON FUNCTION lock_name(TEXT) IS
    'fairrelay internal: not for callers; call enqueue or enqueue_many';
COMMENT ON FUNCTION ident_problem(TEXT) IS
    'fairrelay internal: not for callers; call enqueue or enqueue_many';
COMMENT ON FUNCTION park_paused_flow() IS
    'fairrelay internal: the flow table''s trigger; not for callers';
