-- 006: a held copy is kept per place too: its key is the event id, the
-- body's SHA-256, the flow and the seq. Keyed by id and body alone, a copy
-- of the same id and body at another flow or seq (a stray or forged copy,
-- two stores publishing to one broker, an id reused after the queue's
-- retention forgot it) stored nothing, yet Hold answered held, the
-- consumer acked the broker's copy, and the genuine delivery was lost: its
-- flow stuck for good (a breaker's report).
CREATE TABLE held_new (
    event_id    TEXT NOT NULL,
    flow_id     TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    body        BLOB NOT NULL,
    body_sha256 BLOB NOT NULL,
    reason      TEXT NOT NULL,
    PRIMARY KEY (event_id, body_sha256, flow_id, seq)
);
INSERT INTO held_new (event_id, flow_id, seq, body, body_sha256, reason)
    SELECT event_id, flow_id, seq, body, body_sha256, reason FROM held;
DROP TABLE held;
ALTER TABLE held_new RENAME TO held;
CREATE INDEX held_flow ON held (flow_id, seq);
