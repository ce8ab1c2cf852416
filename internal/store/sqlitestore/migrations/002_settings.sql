-- 002: the store's settings (SPEC §7: the entry rule is a property of the
-- store, recorded when it is created; a store created before this migration
-- records the rule of its first open), and the due index in (wait_until,
-- flow_id) order, so that a claim pages through due flows by that key.
CREATE TABLE settings (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    entry TEXT CHECK (entry IN ('seed', 'fair'))
);
INSERT INTO settings (id, entry) VALUES (1, NULL);

DROP INDEX flow_waiting;
CREATE INDEX flow_waiting ON flow (wait_until, flow_id) WHERE wait_until IS NOT NULL;
