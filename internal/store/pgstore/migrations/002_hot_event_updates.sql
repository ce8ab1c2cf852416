-- 002: make the updates of an event row HOT (heap-only: no index entries
-- written), the bulk of a claim's and a settle's work on PostgreSQL.
-- An update is HOT only when no indexed column changes — a column in a
-- partial index's predicate counts — and the page has room. So:
--   * event_quarantined, whose predicate reads state, moves to the flow
--     table: a quarantined event is always its flow's head (only a head is
--     claimed, and only a claimed event is quarantined; a redrive makes it
--     ready again), so the quarantined events are the heads of the flows
--     that are parked (neither runnable nor waiting) while they have one;
--   * event pages keep a third free for the new row versions.
-- The answers do not change; EventListQuarantined reads through the new
-- index.
DROP INDEX event_quarantined;
CREATE INDEX flow_parked_head ON flow (flow_id) WHERE NOT runnable AND wait_until IS NULL AND head_seq <= seq;
ALTER TABLE event SET (fillfactor = 65);
