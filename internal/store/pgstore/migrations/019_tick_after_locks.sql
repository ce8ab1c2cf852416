-- 019: an enqueue that waited for a lock reads the store's tick again once
-- it holds its rows (SPEC §2: a write checks at >= the stored tick; §10: an
-- enqueue still checks it). enqueue_many read the stored tick once, at its
-- start; a call that then waited for a flow (or the store's limit row) that
-- another transaction held committed at the tick it had read: a breaker's
-- run, enqueue('a2', 'A', …, 500) waited for a transaction that enqueued
-- onto A at 1000, then answered created with seq 3 at tick 500, behind seq
-- 2 at 1000; with at left NULL it ran at the stale stored tick likewise.
-- Now, in every path that may wait for a flow (the batch path, the one
-- event of the general path, and before enqueue_events, which takes the
-- same rows again), the call takes its rows first and then reads the
-- stored tick: an explicit at below it is clock_regressed (FR001), as
-- when it is below at the start; at NULL, or under p_floor, runs at it.
-- The common call does not wait for a flow (SKIP LOCKED: a held flow goes
-- the general way). A call of one event that waited for another
-- transaction's insert of the same id (its answer then existing or
-- conflict, the common call's included) reads the tick again before it
-- answers, likewise. Not covered: a new flow that another transaction
-- creates while this one waits for its name (enqueue_events' per-event
-- lock_name) — both then write one new flow, rarely.
--
-- The function is restated from its own definition with the re-reads
-- inserted at anchors that must each occur once (checked, so that the
-- migration cannot apply to a body it was not written for); run again, it
-- changes nothing.
DO $$
DECLARE
    def TEXT;
    recheck CONSTANT TEXT := '
            -- Migration 019: the stored tick, read again now that the
            -- call holds its rows (it may have waited for them).
            SELECT sc.tick INTO v_now FROM stored_clock sc;
            IF v_now > v_at THEN
                IF p_at IS NULL OR p_floor THEN
                    v_at := v_now;
                ELSE
                    RAISE EXCEPTION USING ERRCODE = ''FR001'', DETAIL = format(''%s %s'', v_at, v_now),
                        MESSAGE = format(''enqueue at tick %s: the store is at tick %s'', v_at, v_now);
                END IF;
            END IF;';
    anchors TEXT[] := ARRAY[
        -- the batch path's flows
        '            WHERE f.flow_id = ANY (p_flows || ARRAY(SELECT e.flow_id FROM event e WHERE e.event_id = ANY (p_ids)))
            ORDER BY f.flow_id FOR NO KEY UPDATE;',
        -- the general path's one event: its flow and its known id's
        '            WHERE f.flow_id = p_flows[1] OR f.flow_id = (SELECT e.flow_id FROM event e WHERE e.event_id = p_ids[1])
            ORDER BY f.flow_id FOR NO KEY UPDATE;'];
    before_events CONSTANT TEXT := '        SELECT array_agg(e.status ORDER BY e.i), array_agg(e.seq ORDER BY e.i), array_agg(e."limit" ORDER BY e.i)
        INTO r_status, r_seq, r_limit
        FROM enqueue_events(';
    -- enqueue_events' own first locks (migration 017), taken here first
    -- in the same order: the store's limit row, then the flows.
    pre_events CONSTANT TEXT := '        IF lim.max_backlog > 0 THEN
            PERFORM 1 FROM settings s WHERE s.id = 1 AND s.max_backlog > 0 FOR NO KEY UPDATE;
        END IF;
        PERFORM 1 FROM flow f
        WHERE f.flow_id = ANY (p_flows || coalesce(p_groups, ''{}'')
                               || ARRAY(SELECT e.flow_id FROM event e WHERE e.event_id = ANY (p_ids))
                               || ARRAY(SELECT t.flow_id FROM tombstone t WHERE t.event_id = ANY (p_ids)))
        ORDER BY f.flow_id FOR NO KEY UPDATE;';
    -- the answers existing or conflict after a wait for the same id's
    -- insert: the common call's and the general path's (twice), and the
    -- general path's new flow given up (once)
    flow_tick CONSTANT TEXT := '            UPDATE flow f SET tick = v_at WHERE f.flow_id = p_flows[1] AND f.tick < v_at;';
    settings_tick CONSTANT TEXT := '                            UPDATE settings s SET tick = v_at WHERE s.id = 1 AND s.tick < v_at;';
    a TEXT;
BEGIN
    SELECT pg_get_functiondef(p.oid) INTO def
    FROM pg_proc p
    WHERE p.oid = 'enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])'::regprocedure;
    IF position('Migration 019:' IN def) > 0 THEN
        RETURN; -- applied already (its record lost): nothing to do
    END IF;
    FOREACH a IN ARRAY anchors || ARRAY[before_events, '    hd       RECORD;
BEGIN'] LOOP
        IF (length(def) - length(replace(def, a, ''))) / length(a) <> 1 THEN
            RAISE EXCEPTION 'migration 019: enqueue_many''s definition does not hold this exactly once: %', a;
        END IF;
    END LOOP;
    -- flow_tick also matches, at a deeper indentation, inside the general
    -- path's line: two occurrences in all, each one answer's.
    IF (length(def) - length(replace(def, flow_tick, ''))) / length(flow_tick) <> 2
       OR (length(def) - length(replace(def, settings_tick, ''))) / length(settings_tick) <> 1 THEN
        RAISE EXCEPTION 'migration 019: enqueue_many''s definition does not hold the answers'' tick updates as expected';
    END IF;
    FOREACH a IN ARRAY anchors LOOP
        def := replace(def, a, a || recheck);
    END LOOP;
    def := replace(def, flow_tick, recheck || E'\n' || flow_tick);
    def := replace(def, settings_tick, recheck || E'\n' || settings_tick);
    def := replace(def, before_events, pre_events || replace(recheck, E'\n            ', E'\n        ') || E'\n' || before_events);
    def := replace(def, '    hd       RECORD;
BEGIN', '    hd       RECORD;
    v_now    BIGINT;  -- the stored tick read again after the locks (migration 019)
BEGIN');
    EXECUTE def;
END
$$;
