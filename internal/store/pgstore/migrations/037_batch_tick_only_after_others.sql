-- 037: a batch at the store's tick that makes new flows is not answered
-- clock_regressed while other writers move the tick.
--
-- Migration 021 made enqueue_events read the stored tick again after taking
-- each new flow's name, and raise FR001 when it had moved past the call's
-- tick, so that a call that waited for another transaction making the flow
-- would not append to it behind that transaction's tick; enqueue_many then
-- started the whole call over, ten times at most. But the tick moves every
-- millisecond beside busy relays, whose claims and settles touch no name of
-- the call, so a batch of many new flows (a group's, which goes event by
-- event) found it moved at almost every name, and after ten start-overs a
-- call at NULL (the store's tick) failed with FR001, clock_regressed (an
-- SRE's drill: a bulk enqueue of 1 000 events onto 100 new flows of a new
-- group beside two busy relays, 8 of 8; the SQL function the same).
--
-- Now the tick is read again only when the call depends on another
-- transaction's write: the flow turned out to exist after its name was
-- taken, a group it joins was made while it waited for the name, or a flow
-- that another transaction made and committed after the call's first lock
-- pass was found and locked (that last one 021 left out; the flows the
-- call makes itself now join the flows it holds, so that its later events
-- do not take them for another's). A flow the call makes itself, in a
-- group that existed or that it makes, depends on no one's tick. And a call at NULL (or with floor) that still finds the tick
-- moved ten times is busy (40001: try again), not clock_regressed, which
-- only an explicit at can be.
--
-- Both functions are restated from their own definitions with anchors
-- that must each occur once (checked, so that the migration cannot apply
-- to a body it was not written for); run again, it changes nothing.
DO $mig$
DECLARE
    def TEXT;
    fn_events CONSTANT TEXT := 'enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)';
    fn_many   CONSTANT TEXT := 'enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])';
    a_decl    CONSTANT TEXT := E'    v_named    BOOLEAN;\n';
    a_reset   CONSTANT TEXT := E'        v_named := false;\n';
    a_lock    CONSTANT TEXT := E'            v_locked := v_locked || p_flows[i];\n            CONTINUE;\n';
    a_exit    CONSTANT TEXT := E'        EXIT WHEN (pr.has_flow AND p_flows[i] = ANY (v_locked)) OR v_named;\n';
    a_names   CONSTANT TEXT := E'        IF coalesce(p_groups[i], p_flows[i]) = p_flows[i] THEN\n            PERFORM lock_name(''f:'' || p_flows[i]);';
    a_recheck CONSTANT TEXT := E'        IF v_named THEN\n            SELECT sc.tick INTO v_now FROM stored_clock sc;';
    a_made    CONSTANT TEXT := E'                new_seq := 1;\n                v_inserted := true;\n';
    a_handler CONSTANT TEXT := E'        IF (p_at IS NOT NULL AND NOT p_floor) OR attempt = 10 THEN\n            RAISE;\n        END IF;\n    WHEN unique_violation OR deadlock_detected THEN';
    a TEXT;
BEGIN
    SELECT pg_get_functiondef(f.oid) INTO def FROM pg_proc f WHERE f.oid = fn_events::regprocedure;
    IF position('Migration 037' IN def) = 0 THEN
        FOREACH a IN ARRAY ARRAY[a_decl, a_reset, a_lock, a_exit, a_names, a_recheck, a_made] LOOP
            IF (length(def) - length(replace(def, a, ''))) / length(a) <> 1 THEN
                RAISE EXCEPTION 'migration 037: % does not hold % once', fn_events, a;
            END IF;
        END LOOP;
        def := replace(def, a_decl, a_decl ||
            E'    v_meanwhile BOOLEAN;  -- Migration 037: the event depends on another transaction''s write\n' ||
            E'    v_grp_before BOOLEAN; -- Migration 037: the group it joins existed before its names were taken\n');
        def := replace(def, a_reset, a_reset || E'        v_meanwhile := false;\n');
        -- A flow another transaction made and committed since the first
        -- lock pass: locked now, and depended on.
        def := replace(def, a_lock, E'            v_locked := v_locked || p_flows[i];\n            v_meanwhile := true;\n            CONTINUE;\n');
        -- After the names: the flow exists, or the group appeared, only if
        -- another transaction made it while this one waited.
        def := replace(def, a_exit,
            E'        IF v_named AND (pr.has_flow OR (NOT v_grp_before AND EXISTS (SELECT 1 FROM grp g WHERE g.group_id = coalesce(p_groups[i], p_flows[i])))) THEN\n' ||
            E'            v_meanwhile := true;\n        END IF;\n' || a_exit);
        def := replace(def, a_names,
            E'        v_grp_before := EXISTS (SELECT 1 FROM grp g WHERE g.group_id = coalesce(p_groups[i], p_flows[i]));\n' || a_names);
        -- A flow this call made is its own, not another's: its later
        -- events find it among the flows the call holds.
        def := replace(def, a_made, a_made || E'                v_locked := v_locked || p_flows[i];\n');
        def := replace(def, a_recheck, E'        IF v_meanwhile THEN\n            SELECT sc.tick INTO v_now FROM stored_clock sc;');
        EXECUTE def;
    END IF;

    SELECT pg_get_functiondef(f.oid) INTO def FROM pg_proc f WHERE f.oid = fn_many::regprocedure;
    IF position('Migration 037' IN def) = 0 THEN
        IF (length(def) - length(replace(def, a_handler, ''))) / length(a_handler) <> 1 THEN
            RAISE EXCEPTION 'migration 037: % does not hold its FR001 handler once', fn_many;
        END IF;
        def := replace(def, a_handler,
            E'        IF p_at IS NOT NULL AND NOT p_floor THEN\n            RAISE;\n' ||
            E'        ELSIF attempt = 10 THEN\n' ||
            E'            -- Migration 037: at the store''s tick, never clock_regressed.\n' ||
            E'            RAISE EXCEPTION USING ERRCODE = ''40001'',\n' ||
            E'                MESSAGE = ''enqueue: the store''''s tick moved past the call''''s ten times while it waited for flows or groups other transactions were making; nothing was changed, try again'';\n' ||
            E'        END IF;\n    WHEN unique_violation OR deadlock_detected THEN');
        EXECUTE def;
    END IF;
END
$mig$;
