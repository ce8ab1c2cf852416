-- 001: the receiver's inbox of SPEC §3 on PostgreSQL: the same tables as
-- migrations/sqlite/001_init.sql. Text keys are COLLATE "C" so that ordering
-- is bytewise, as in SQLite.
CREATE TABLE receipt (
    event_id TEXT COLLATE "C" PRIMARY KEY,
    flow_id  TEXT COLLATE "C" NOT NULL,
    seq      BIGINT NOT NULL,
    body     BYTEA NOT NULL,
    UNIQUE (flow_id, seq)
);
CREATE TABLE projection (
    flow_id TEXT COLLATE "C" PRIMARY KEY,
    seq     BIGINT NOT NULL,
    total   BIGINT NOT NULL
);
