-- 002: deliveries the inbox could not apply yet, kept for a broker consumer
-- (package consume): an event that answered gap (its predecessor is not
-- applied) or a permanent answer, stored so that the consumer can ack the
-- broker's copy. Held messages of a stuck flow then stop filling the
-- broker's window of unacked messages (RabbitMQ's prefetch, JetStream's
-- MaxAckPending), which held up every other flow once it was full (a
-- breaker's report). ReceiveHeld applies them in seq order.
CREATE TABLE held (
    event_id TEXT PRIMARY KEY,
    flow_id  TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    body     BLOB NOT NULL
);
CREATE INDEX held_flow ON held (flow_id, seq);
