-- 001: the queue store of SPEC §2 with the per-flow head index of issue 4.
CREATE TABLE clock (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    tick   INTEGER NOT NULL,
    ticket INTEGER NOT NULL,
    flows  INTEGER NOT NULL
);
INSERT INTO clock (id, tick, ticket, flows) VALUES (1, 0, 0, 0);

CREATE TABLE flow (
    flow_id    TEXT PRIMARY KEY,
    ord        INTEGER NOT NULL UNIQUE,
    seq        INTEGER NOT NULL,
    served     INTEGER NOT NULL,
    head_seq   INTEGER NOT NULL,
    runnable   INTEGER NOT NULL,
    wait_until INTEGER
) WITHOUT ROWID;
-- The dispatch order of claim: runnable heads by (served, flow_id) for the
-- seed policy and (served, ord) for the fair policy. Partial, so the index
-- holds only flows that can be claimed now.
CREATE INDEX flow_runnable_seed ON flow (served, flow_id) WHERE runnable = 1;
CREATE INDEX flow_runnable_fair ON flow (served, ord) WHERE runnable = 1;
-- Heads that become eligible as time passes (backoff end, lease end).
CREATE INDEX flow_waiting ON flow (wait_until) WHERE wait_until IS NOT NULL;

CREATE TABLE event (
    event_id          TEXT PRIMARY KEY,
    flow_id           TEXT NOT NULL REFERENCES flow (flow_id),
    seq               INTEGER NOT NULL,
    body              BLOB NOT NULL,
    state             TEXT NOT NULL CHECK (state IN ('ready', 'inflight', 'acked', 'quarantined')),
    generation        INTEGER NOT NULL,
    attempts          INTEGER NOT NULL,
    lifetime_attempts INTEGER NOT NULL,
    reason            TEXT,
    next_at           INTEGER NOT NULL,
    lease_until       INTEGER NOT NULL,
    enqueued_at       INTEGER NOT NULL,
    UNIQUE (flow_id, seq)
);
CREATE INDEX event_quarantined ON event (flow_id, seq) WHERE state = 'quarantined';

CREATE TABLE audit (
    no              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT NOT NULL,
    action          TEXT NOT NULL,
    reason          TEXT NOT NULL,
    operator        TEXT,
    previous_reason TEXT,
    generation      INTEGER NOT NULL,
    at              INTEGER NOT NULL
);
