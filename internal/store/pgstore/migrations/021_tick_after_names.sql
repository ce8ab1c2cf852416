-- 021: an enqueue that waited for a new flow's name reads the store's tick
-- again once it holds it (SPEC §2: a write checks at >= the stored tick;
-- §10: an enqueue still checks it). Migration 019 left this path: a call
-- that names a flow another transaction is making waits for the flow's
-- name (the batch path's name_claim insert, enqueue_events' lock_name),
-- and then found the flow made, at the other transaction's tick, and
-- appended to it at the tick it had read before: a grouped call at 500
-- onto a flow made at 1000 answered created at 500, behind the other's
-- event in the flow, and at NULL it ran at the stale stored tick.
--
-- Now the batch path reads the tick after its name claims (019's re-read
-- after its flow locks moves there: nothing is written in between), and
-- enqueue_events, once it has taken a new flow's name, reads it and
-- raises FR001 when it moved past the call's tick. enqueue_many's event-
-- by-event loop passes FR001 on for an explicit at (clock_regressed, and
-- the subtransaction has rolled the call's writes back) and otherwise
-- starts over, reading the tick after its locks (019), so that every
-- event of the call is written at the one tick it answers.
--
-- Both functions are restated from their own definitions with anchors
-- that must each occur as expected (checked, so that the migration cannot
-- apply to a body it was not written for); run again, it changes nothing.
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
    batch_flows CONSTANT TEXT := '            WHERE f.flow_id = ANY (p_flows || ARRAY(SELECT e.flow_id FROM event e WHERE e.event_id = ANY (p_ids)))
            ORDER BY f.flow_id FOR NO KEY UPDATE;';
    batch_names CONSTANT TEXT := '            ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name WHERE false;';
    names_recheck CONSTANT TEXT := '
            -- Migration 021: the stored tick, read again now that the
            -- call holds its rows and the names of the flows it may make
            -- (it may have waited for them: another transaction making
            -- one of these flows).
            SELECT sc.tick INTO v_now FROM stored_clock sc;
            IF v_now > v_at THEN
                IF p_at IS NULL OR p_floor THEN
                    v_at := v_now;
                ELSE
                    RAISE EXCEPTION USING ERRCODE = ''FR001'', DETAIL = format(''%s %s'', v_at, v_now),
                        MESSAGE = format(''enqueue at tick %s: the store is at tick %s'', v_at, v_now);
                END IF;
            END IF;';
    events_handler CONSTANT TEXT := '    EXCEPTION WHEN unique_violation OR deadlock_detected THEN
        -- Another transaction got there first: start over, after a pause';
    tick_handler CONSTANT TEXT := '    EXCEPTION WHEN SQLSTATE ''FR001'' THEN
        -- Migration 021: enqueue_events took a new flow''s name after
        -- another transaction made the flow, and the store''s tick is past
        -- the call''s. An explicit at is clock_regressed; otherwise start
        -- over (nothing is written: the subtransaction rolled back), at
        -- the tick read after the locks.
        IF (p_at IS NOT NULL AND NOT p_floor) OR attempt = 10 THEN
            RAISE;
        END IF;
    WHEN unique_violation OR deadlock_detected THEN
        -- Another transaction got there first: start over, after a pause';
    named CONSTANT TEXT := '        v_named := true;
        END LOOP;';
    named_recheck CONSTANT TEXT := '
        -- Migration 021: a flow''s name taken (another transaction making
        -- the flow may have been waited for, and its tick committed): the
        -- stored tick, read again. Past v_at, the caller starts over or
        -- answers clock_regressed (enqueue_many''s FR001 handler).
        IF v_named THEN
            SELECT sc.tick INTO v_now FROM stored_clock sc;
            IF v_now > v_at THEN
                RAISE EXCEPTION USING ERRCODE = ''FR001'', DETAIL = format(''%s %s'', v_at, v_now),
                    MESSAGE = format(''enqueue at tick %s: the store is at tick %s'', v_at, v_now);
            END IF;
        END IF;';
    events_decl CONSTANT TEXT := '    v_named    BOOLEAN;
BEGIN';
BEGIN
    -- enqueue_many: the batch path's re-read moves after its name claims,
    -- and the event-by-event loop handles FR001.
    SELECT pg_get_functiondef(p.oid) INTO def
    FROM pg_proc p
    WHERE p.oid = 'enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])'::regprocedure;
    IF position('Migration 021:' IN def) = 0 THEN
        IF (length(def) - length(replace(def, batch_flows || recheck, ''))) / length(batch_flows || recheck) <> 1
           OR (length(def) - length(replace(def, batch_names, ''))) / length(batch_names) <> 1
           OR (length(def) - length(replace(def, events_handler, ''))) / length(events_handler) <> 1 THEN
            RAISE EXCEPTION 'migration 021: enqueue_many''s definition does not hold its anchors exactly once';
        END IF;
        def := replace(def, batch_flows || recheck, batch_flows);
        def := replace(def, batch_names, batch_names || names_recheck);
        def := replace(def, events_handler, tick_handler);
        EXECUTE def;
    END IF;

    -- enqueue_events: the re-read once a new flow's name is taken.
    SELECT pg_get_functiondef(p.oid) INTO def
    FROM pg_proc p
    WHERE p.oid = 'enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)'::regprocedure;
    IF position('Migration 021:' IN def) = 0 THEN
        IF (length(def) - length(replace(def, named, ''))) / length(named) <> 1
           OR (length(def) - length(replace(def, events_decl, ''))) / length(events_decl) <> 1 THEN
            RAISE EXCEPTION 'migration 021: enqueue_events''s definition does not hold its anchors exactly once';
        END IF;
        def := replace(def, named, named || named_recheck);
        def := replace(def, events_decl, '    v_named    BOOLEAN;
    v_now      BIGINT;  -- the stored tick read again after a name (migration 021)
BEGIN');
        EXECUTE def;
    END IF;
END
$$;
