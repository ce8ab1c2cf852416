-- 008: indexes of the operator console's read views (issue 17), so that no
-- page scans a table:
--   * event_waiting: event rows whose own acked_at is not set, by enqueue
--     tick. The oldest waiting head is the first of them at or after its
--     flow's head_seq (an acked event whose state the flow row still holds,
--     migration 004, has no acked_at of its own: one per flow at most,
--     skipped by that test);
--   * flow_paused: the paused flows by flow id (SPEC §9).
CREATE INDEX event_waiting ON event (enqueued_at, event_id) WHERE acked_at IS NULL;
CREATE INDEX flow_paused ON flow (flow_id) WHERE paused;
