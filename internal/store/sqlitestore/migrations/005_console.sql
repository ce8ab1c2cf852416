-- 005: indexes of the operator console's read views (issue 17), so that no
-- page scans a table:
--   * event_inflight: the inflight heads (few: one per delivery under way),
--     counted by the overview;
--   * event_waiting: the events not acked by enqueue tick, so the oldest
--     waiting head is the index's first entry (the oldest event not acked
--     is always its flow's head);
--   * flow_paused: the paused flows by flow id (SPEC §9).
CREATE INDEX event_inflight ON event (flow_id) WHERE state = 'inflight';
CREATE INDEX event_waiting ON event (enqueued_at, event_id) WHERE acked_at IS NULL;
CREATE INDEX flow_paused ON flow (flow_id) WHERE paused = 1;
