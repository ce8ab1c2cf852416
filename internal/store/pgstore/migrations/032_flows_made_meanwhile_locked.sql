-- 032: a flow made after an enqueue locked its flows is locked before the limits are read.
--
-- Each lock of "the flows of the call" (enqueue_many's batch path, enqueue_events)
-- locked the flows its snapshot saw; a flow of a group made and committed after it
-- (its maker let the group's limit row go at its commit) was locked by no one, so an
-- enqueue onto it could read "no limit" while a configure setting the group's first
-- limit counted the group without it: the counter one below the backlog (a hunter's
-- deterministic reproductions; TestPostgresOutboxUnderContention once in CI). The
-- batch path now goes event by event when it meets such a flow, and enqueue_events
-- locks it and reads it again. The configure side: pgstore.lockFirstGroupLimit.

DO $mig$
DECLARE
    def TEXT;
    p   RECORD;
BEGIN
    SELECT pg_get_functiondef(f.oid) INTO def FROM pg_proc f WHERE f.oid = 'enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])'::regprocedure;
    IF position('Migration 032:' IN def) > 0 THEN
        RETURN;
    END IF;
    FOR p IN SELECT v.anchor, v.patch FROM (VALUES
    ($a$    v_fast   BOOLEAN := false; -- the common call's statement found its flow (migration 023)
$a$,
     $a$    v_fast   BOOLEAN := false; -- the common call's statement found its flow (migration 023)
    v_locked TEXT[];  -- Migration 032: the flows the batch's first statement locked
$a$),
    ($a$            PERFORM 1 FROM flow f
            WHERE f.flow_id = ANY (p_flows || ARRAY(SELECT e.flow_id FROM event e WHERE e.event_id = ANY (p_ids)))
            ORDER BY f.flow_id FOR NO KEY UPDATE;
$a$,
     $a$            SELECT coalesce(array_agg(s.flow_id), '{}') INTO v_locked FROM (SELECT f.flow_id FROM flow f
            WHERE f.flow_id = ANY (p_flows || ARRAY(SELECT e.flow_id FROM event e WHERE e.event_id = ANY (p_ids)))
            ORDER BY f.flow_id FOR NO KEY UPDATE) s;
$a$),
    ($a$            IF EXISTS (SELECT 1 FROM grp g WHERE g.group_id = ANY (p_flows))
$a$,
     $a$            IF EXISTS (SELECT 1 FROM grp g WHERE g.group_id = ANY (p_flows))
               /* Migration 032: a flow made meanwhile, not locked. */
               OR EXISTS (SELECT 1 FROM flow f WHERE f.flow_id = ANY (p_flows) AND f.flow_id <> ALL (v_locked))
$a$)
    ) AS v (anchor, patch) LOOP
        IF (length(def) - length(replace(def, p.anchor, ''))) / length(p.anchor) <> 1 THEN
            RAISE EXCEPTION 'migration 032: the definition does not hold its anchor exactly once: %', p.anchor;
        END IF;
        def := replace(def, p.anchor, p.patch);
    END LOOP;
    EXECUTE def;
END
$mig$;

DO $mig$
DECLARE
    def TEXT;
    p   RECORD;
BEGIN
    SELECT pg_get_functiondef(f.oid) INTO def FROM pg_proc f WHERE f.oid = 'enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)'::regprocedure;
    IF position('Migration 032:' IN def) > 0 THEN
        RETURN;
    END IF;
    FOR p IN SELECT v.anchor, v.patch FROM (VALUES
    ($a$    v_now      BIGINT;  -- the stored tick read again after a name (migration 021)
$a$,
     $a$    v_now      BIGINT;  -- the stored tick read again after a name (migration 021)
    v_locked   TEXT[];  -- Migration 032: the flows this call holds
$a$),
    ($a$    IF n = 1 THEN
        PERFORM 1 FROM flow f
$a$,
     $a$    IF n = 1 THEN
        SELECT coalesce(array_agg(s.flow_id), '{}') INTO v_locked FROM (SELECT f.flow_id FROM flow f
$a$),
    ($a$           OR f.flow_id = (SELECT t.flow_id FROM tombstone t WHERE t.event_id = p_ids[1])
        ORDER BY f.flow_id FOR NO KEY UPDATE;
    ELSE
        PERFORM 1 FROM flow f
$a$,
     $a$           OR f.flow_id = (SELECT t.flow_id FROM tombstone t WHERE t.event_id = p_ids[1])
        ORDER BY f.flow_id FOR NO KEY UPDATE) s;
    ELSE
        SELECT coalesce(array_agg(s.flow_id), '{}') INTO v_locked FROM (SELECT f.flow_id FROM flow f
$a$),
    ($a$           OR (f.flow_id = ANY (coalesce(p_groups, '{}')) AND f.group_id IS NULL)
        ORDER BY f.flow_id FOR NO KEY UPDATE;
    END IF;
$a$,
     $a$           OR (f.flow_id = ANY (coalesce(p_groups, '{}')) AND f.group_id IS NULL)
        ORDER BY f.flow_id FOR NO KEY UPDATE) s;
    END IF;
$a$),
    ($a$        EXIT WHEN pr.has_flow OR v_named;
$a$,
     $a$        /* Migration 032: a flow made meanwhile is locked, and read again. */
        EXIT WHEN (pr.has_flow AND p_flows[i] = ANY (v_locked)) OR v_named;
        IF pr.has_flow THEN
            PERFORM 1 FROM flow f WHERE f.flow_id = p_flows[i] FOR NO KEY UPDATE;
            v_locked := v_locked || p_flows[i];
            CONTINUE;
        END IF;
$a$)
    ) AS v (anchor, patch) LOOP
        IF (length(def) - length(replace(def, p.anchor, ''))) / length(p.anchor) <> 1 THEN
            RAISE EXCEPTION 'migration 032: the definition does not hold its anchor exactly once: %', p.anchor;
        END IF;
        def := replace(def, p.anchor, p.patch);
    END LOOP;
    EXECUTE def;
END
$mig$;
