-- 004: an operator's waiver of one event a receiver can never take (an id
-- another event of the flow holds, a body it refuses): the flow's
-- projection moves past its seq with no effect, and a redelivery of that
-- event answers duplicate, so the sender acks it and the flow goes on.
-- The same table as migrations/postgres/004_waiver.sql.
CREATE TABLE waiver (
    flow_id   TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    event_id  TEXT NOT NULL,
    reason    TEXT NOT NULL,
    operator  TEXT,
    waived_at TEXT NOT NULL, -- wall-clock time, UTC, RFC 3339
    PRIMARY KEY (flow_id, seq)
);
