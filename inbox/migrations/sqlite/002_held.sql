-- 002: deliveries the inbox could not apply yet, kept for a broker consumer
-- (package consume): an event that answered gap (its predecessor is not
-- applied) or a permanent answer, stored so that the consumer can ack the
-- broker's copy. Held messages of a stuck flow then stop filling the
-- broker's window of unacked messages (RabbitMQ's prefetch, JetStream's
-- MaxAckPending), which held up every other flow once it was full (a
-- breaker's report). ReceiveHeld applies them in seq order. Copies of one
-- id with different bodies (a faulty publisher) are kept apart, so that a
-- bad copy held first cannot shadow the good one; body_sha256 is the
-- SHA-256 of body; reason the inbox's last answer to it (gap, or the
-- permanent outcome that refused it).
CREATE TABLE held (
    event_id    TEXT NOT NULL,
    flow_id     TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    body        BLOB NOT NULL,
    body_sha256 BLOB NOT NULL,
    reason      TEXT NOT NULL,
    PRIMARY KEY (event_id, body_sha256)
);
CREATE INDEX held_flow ON held (flow_id, seq);
