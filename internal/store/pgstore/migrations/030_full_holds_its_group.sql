-- 030: a flow refused as full in a call holds only the group it would join.
--
-- Since migration 007, a flow that answered full in a call of many events
-- answered full again for its later events in that call, whatever acks
-- committed since, so that a flow's later event never overtakes a refused
-- one. The rule was keyed by the flow alone. An event that would have made
-- a flow in a full group made nothing; a later event of the same call
-- naming that flow in another group (or in none, so its own) was refused
-- too, where the same two events enqueued one after the other, and SQLite's
-- batch, answer full, created (SPEC §8; a breaker's report). A refusal is
-- now kept with the group its event joins or would join: a flow that
-- exists keeps its group, so nothing changes for it; a flow that does not
-- is weighed again when a later event names another group.
--
-- Restated from the function's own definition with anchors that must each
-- occur exactly once (checked); run again, nothing changes.
DO $mig$
DECLARE
    def TEXT;
    p   RECORD;
BEGIN
    SELECT pg_get_functiondef(f.oid) INTO def
    FROM pg_proc f
    WHERE f.oid = 'enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)'::regprocedure;
    IF position('Migration 030:' IN def) > 0 THEN
        RETURN;
    END IF;
    FOR p IN SELECT v.anchor, v.patch FROM (VALUES
    ($a$    full_limits TEXT[] := '{}';
$a$,
     $a$    full_limits TEXT[] := '{}';
    full_groups TEXT[] := '{}';  -- Migration 030: the group each refused event joins or would join.
$a$),
    ($a$        IF v_full IS NULL AND p_flows[i] = ANY (full_flows) THEN
            v_full := full_limits[array_position(full_flows, p_flows[i])];
        END IF;
$a$,
     $a$        IF v_full IS NULL AND p_flows[i] = ANY (full_flows) THEN
            /* Migration 030: only a refusal in the group this event joins. */
            SELECT u.lim INTO v_full FROM unnest(full_flows, full_groups, full_limits) AS u (flow, grp, lim)
            WHERE u.flow = p_flows[i] AND u.grp = v_group LIMIT 1;
        END IF;
$a$),
    ($a$full_flows := full_flows || p_flows[i]; full_limits := full_limits || v_full;
$a$,
     $a$full_flows := full_flows || p_flows[i]; full_limits := full_limits || v_full;
            full_groups := full_groups || v_group;
$a$)
    ) AS v (anchor, patch) LOOP
        IF (length(def) - length(replace(def, p.anchor, ''))) / length(p.anchor) <> 1 THEN
            RAISE EXCEPTION 'migration 030: enqueue_events''s definition does not hold its anchor exactly once: %', p.anchor;
        END IF;
        def := replace(def, p.anchor, p.patch);
    END LOOP;
    EXECUTE def;
END
$mig$;
