-- 001: the queue store of SPEC §2 with the per-flow head index of issue 4 —
-- the same tables, columns and indexes as the SQLite backend's 001_init.sql.
-- Text keys are COLLATE "C" so that ordering is bytewise, as in SQLite.
CREATE TABLE clock (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    tick   BIGINT NOT NULL,
    ticket BIGINT NOT NULL,
    flows  BIGINT NOT NULL
);
INSERT INTO clock (id, tick, ticket, flows) VALUES (1, 0, 0, 0);

CREATE TABLE flow (
    flow_id    TEXT COLLATE "C" PRIMARY KEY,
    ord        BIGINT NOT NULL UNIQUE,
    seq        BIGINT NOT NULL,
    served     BIGINT NOT NULL,
    head_seq   BIGINT NOT NULL,
    runnable   BOOLEAN NOT NULL,
    wait_until BIGINT
);
-- The dispatch order of claim: runnable heads by (served, flow_id) for the
-- seed policy and (served, ord) for the fair policy. Partial, so the index
-- holds only flows that can be claimed now.
CREATE INDEX flow_runnable_seed ON flow (served, flow_id) WHERE runnable;
CREATE INDEX flow_runnable_fair ON flow (served, ord) WHERE runnable;
-- Heads that become eligible as time passes (backoff end, lease end).
CREATE INDEX flow_waiting ON flow (wait_until) WHERE wait_until IS NOT NULL;

CREATE TABLE event (
    event_id          TEXT COLLATE "C" PRIMARY KEY,
    flow_id           TEXT COLLATE "C" NOT NULL REFERENCES flow (flow_id),
    seq               BIGINT NOT NULL,
    body              BYTEA NOT NULL,
    state             TEXT NOT NULL CHECK (state IN ('ready', 'inflight', 'acked', 'quarantined')),
    generation        BIGINT NOT NULL,
    attempts          BIGINT NOT NULL,
    lifetime_attempts BIGINT NOT NULL,
    reason            TEXT,
    next_at           BIGINT NOT NULL,
    lease_until       BIGINT NOT NULL,
    enqueued_at       BIGINT NOT NULL,
    UNIQUE (flow_id, seq)
);
CREATE INDEX event_quarantined ON event (flow_id, seq) WHERE state = 'quarantined';

CREATE TABLE audit (
    no              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        TEXT COLLATE "C" NOT NULL,
    action          TEXT NOT NULL,
    reason          TEXT NOT NULL,
    operator        TEXT,
    previous_reason TEXT,
    generation      BIGINT NOT NULL,
    at              BIGINT NOT NULL
);
