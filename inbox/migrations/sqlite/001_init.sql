-- 001: the receiver's inbox of SPEC §3: one receipt per event id, and the
-- ledger projection per flow.
CREATE TABLE receipt (
    event_id TEXT PRIMARY KEY,
    flow_id  TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    body     BLOB NOT NULL,
    UNIQUE (flow_id, seq)
);
CREATE TABLE projection (
    flow_id TEXT PRIMARY KEY,
    seq     INTEGER NOT NULL,
    total   INTEGER NOT NULL
);
