-- 040: the event-by-event path takes its groups' limit rows before it reads
-- the store's tick again.
--
-- Migration 039 dropped enqueue_events' read of the tick after a new
-- flow's names; that read came after the group's limit row (grp_limit),
-- which the call locks for a new flow of a group (FOR SHARE, or FOR NO KEY
-- UPDATE under a limit) and for an event onto a limited group's flow. A
-- configure of the group's limit, or another enqueue taking the group's
-- last place, that committed after the call read the tick was then met at
-- the old tick: the call answered full (or created, counted) below the
-- tick of the write it depended on (SPEC §2; migration 038's rule). For a
-- new flow of an existing group this came with 039; for an event onto an
-- existing flow of a limited group it was there before.
-- TestPostgresFullAnsweredAtTheLimitsTick holds each case.
--
-- Now enqueue_many locks, after its names and before it reads the tick
-- again, the limit rows of the groups its events join or are in where a
-- limit is set (FOR NO KEY UPDATE, as enqueue_events locks them for the
-- check), then those of its new flows' groups without a limit (FOR SHARE,
-- as enqueue_events locks them for a new flow: new flows of one group do
-- not wait for each other, SPEC §10), each in group order. A writer of one
-- of those rows has committed before the read or waits for the call. Taken
-- in group order, the limit rows no longer make two batches under two
-- limits meet in a deadlock (enqueue_events took them in event order).
--
-- The anchor must occur once (checked); run again, nothing changes.

DO $mig$
DECLARE
    def TEXT;
    a   CONSTANT TEXT := $a$        ORDER BY 1
        ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name WHERE false;
        -- Migration 019: the stored tick, read again now that the
        -- call holds its rows (it may have waited for them).
$a$;
BEGIN
    SELECT pg_get_functiondef(f.oid) INTO def FROM pg_proc f WHERE f.oid = 'enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])'::regprocedure;
    IF position('Migration 040:' IN def) > 0 THEN
        RETURN;
    END IF;
    IF (length(def) - length(replace(def, a, ''))) / length(a) <> 1 THEN
        RAISE EXCEPTION 'migration 040: the definition does not hold its anchor exactly once: %', a;
    END IF;
    def := replace(def, a, $p$        ORDER BY 1
        ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name WHERE false;
        -- Migration 040: the limit rows of the call's groups, before the
        -- tick is read again, in group order: under a limit, every group
        -- an event joins or is in; without one, the groups of new flows.
        PERFORM 1 FROM grp_limit l
        WHERE l.max_backlog > 0
          AND l.group_id IN (SELECT coalesce(f.group_id, f.flow_id, u.grp, u.flow)
                             FROM unnest(p_flows, coalesce(p_groups, array_fill(NULL::text, ARRAY[n]))) AS u (flow, grp)
                             LEFT JOIN flow f ON f.flow_id = u.flow)
        ORDER BY l.group_id FOR NO KEY UPDATE;
        PERFORM 1 FROM grp_limit l
        WHERE l.max_backlog = 0
          AND l.group_id IN (SELECT coalesce(u.grp, u.flow)
                             FROM unnest(p_flows, coalesce(p_groups, array_fill(NULL::text, ARRAY[n]))) AS u (flow, grp)
                             WHERE NOT EXISTS (SELECT 1 FROM flow f WHERE f.flow_id = u.flow))
        ORDER BY l.group_id FOR SHARE;
        -- Migration 019: the stored tick, read again now that the
        -- call holds its rows (it may have waited for them).
$p$);
    EXECUTE def;
END
$mig$;
