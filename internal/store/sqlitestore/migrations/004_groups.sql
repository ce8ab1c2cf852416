-- 004: groups, weights, capacity and retention (SPEC §8).
--   * flow.group_id: the group a flow joined; NULL when the flow is its own
--     group (the group named like the flow, which then has no row), so a
--     store where groups are not used keeps no group rows and claims as
--     before;
--   * grp: a group some flow named, a configured group, or the own group of
--     a flow that another flow joined. ord and served place it in the
--     rotation like a flow (ord from the same counter; 0 while a configured
--     group has no flow yet); weight and credit are its share (deficit round
--     robin); runnable_flows counts its member flows in the runnable index;
--     enqueued - acked is its backlog (events not acked); max_slots caps the
--     relay slots its deliveries may hold at once (SPEC §11; 0: none);
--   * the runnable indexes hold flows that are their own group, and a
--     member index and a group runnable index hold the rest. The backend
--     creates the pair its entry rule uses when it opens the store (the
--     rule is recorded after the migrations of a new store run);
--   * clock.enqueued - clock.acked is the store's backlog;
--   * tombstone: what a prune keeps of an acked event so that its id stays
--     idempotent after the body is gone; event.acked_at finds what to prune.
ALTER TABLE flow ADD COLUMN group_id TEXT;
DROP INDEX IF EXISTS flow_runnable_seed;
DROP INDEX IF EXISTS flow_runnable_fair;
CREATE INDEX flow_group ON flow (group_id) WHERE group_id IS NOT NULL;

CREATE TABLE grp (
    group_id       TEXT PRIMARY KEY,
    ord            INTEGER NOT NULL DEFAULT 0,
    served         INTEGER NOT NULL DEFAULT 0,
    weight         INTEGER NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000),
    credit         INTEGER NOT NULL DEFAULT 0,
    runnable_flows INTEGER NOT NULL DEFAULT 0 CHECK (runnable_flows >= 0),
    max_backlog    INTEGER NOT NULL DEFAULT 0 CHECK (max_backlog >= 0),
    enqueued       INTEGER NOT NULL DEFAULT 0,
    acked          INTEGER NOT NULL DEFAULT 0,
    max_slots      INTEGER NOT NULL DEFAULT 0 CHECK (max_slots >= 0)
) WITHOUT ROWID;

ALTER TABLE settings ADD COLUMN max_backlog INTEGER NOT NULL DEFAULT 0 CHECK (max_backlog >= 0);
ALTER TABLE settings ADD COLUMN max_flow_backlog INTEGER NOT NULL DEFAULT 0 CHECK (max_flow_backlog >= 0);

ALTER TABLE clock ADD COLUMN enqueued INTEGER NOT NULL DEFAULT 0;
ALTER TABLE clock ADD COLUMN acked INTEGER NOT NULL DEFAULT 0;
UPDATE clock SET enqueued = (SELECT count(*) FROM event WHERE state <> 'acked');

CREATE TABLE tombstone (
    event_id    TEXT PRIMARY KEY,
    flow_id     TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    body_sha256 BLOB NOT NULL,
    acked_at    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX tombstone_acked ON tombstone (acked_at);

-- Events acked before acked_at was recorded count as acked at the current
-- tick: a prune takes them once retention has passed from now.
UPDATE event SET acked_at = (SELECT tick FROM clock) WHERE state = 'acked' AND acked_at IS NULL;
CREATE INDEX event_acked ON event (acked_at) WHERE acked_at IS NOT NULL;
