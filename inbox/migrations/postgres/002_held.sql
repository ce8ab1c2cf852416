-- 002: deliveries the inbox could not apply yet, kept for a broker
-- consumer: the same table as migrations/sqlite/002_held.sql.
CREATE TABLE held (
    event_id    TEXT COLLATE "C" NOT NULL,
    flow_id     TEXT COLLATE "C" NOT NULL,
    seq         BIGINT NOT NULL,
    body        BYTEA NOT NULL,
    body_sha256 BYTEA NOT NULL,
    reason      TEXT NOT NULL,
    PRIMARY KEY (event_id, body_sha256)
);
CREATE INDEX held_flow ON held (flow_id, seq);
