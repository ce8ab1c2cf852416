-- 039: a call making new flows takes their names before it reads the
-- store's tick, and is not started over when the tick moves meanwhile.
--
-- enqueue_events took each new flow's name, and its group's, event by
-- event, after enqueue_many had read the store's tick; it then read the
-- tick again and, when it had moved (migration 021), had the whole call
-- start over, since the name may have been waited for while another
-- transaction made the flow at a later tick. Beside busy relays the tick
-- moves every millisecond, so a batch of many new flows (in a group, or
-- meeting a limit or a pruned id) started over ten times and answered busy
-- (migration 037; an SRE's drill: 1 000 events onto 100 new flows of a new
-- group beside two busy relays, 8 of 8).
--
-- Now enqueue_many takes every name the call's events may take (each new
-- flow's, and its group's when enqueue_events would: the group named like
-- the flow, or a group with no row yet), in name order, after its flows
-- and before it reads the tick again: a transaction making one of those
-- flows or groups, or configuring such a group, has committed before the
-- read or waits for this one. enqueue_events no longer reads the tick after
-- a name. What it can still meet that another transaction wrote after the
-- read (a flow made or advanced, an id stored) it checks against the tick
-- itself (migration 038). TestPostgresABatchOfNewFlowsBesideMovingTicks
-- wants every batch to succeed. The busy answer after ten start-overs
-- (migration 037) says what is left to start a call over.
--
-- Each anchor must occur once (checked, so that the migration cannot apply
-- to a body it was not written for); run again, it changes nothing.

DO $mig$
DECLARE
    def    TEXT;
    target TEXT;
    p      RECORD;
BEGIN
    FOR target IN VALUES ('enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])'),
                         ('enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)') LOOP
        SELECT pg_get_functiondef(target::regprocedure) INTO def;
        CONTINUE WHEN position('Migration 039:' IN def) > 0;
        FOR p IN SELECT v.anchor, v.patch FROM (VALUES
    ('enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])', $a$           OR (f.flow_id = ANY (coalesce(p_groups, '{}')) AND f.group_id IS NULL)
        ORDER BY f.flow_id FOR NO KEY UPDATE;
        -- Migration 019: the stored tick, read again now that the
        -- call holds its rows (it may have waited for them).
$a$,
     $a$           OR (f.flow_id = ANY (coalesce(p_groups, '{}')) AND f.group_id IS NULL)
        ORDER BY f.flow_id FOR NO KEY UPDATE;
        -- Migration 039: the names enqueue_events may take (lock_name's
        -- rows), all of them, in name order, before the tick is read
        -- again: each new flow's, and its group's where the group is named
        -- like the flow or has no row yet.
        INSERT INTO name_claim (name)
        SELECT DISTINCT k.name
        FROM unnest(p_flows, coalesce(p_groups, array_fill(NULL::text, ARRAY[n]))) AS u (flow, grp),
             LATERAL (VALUES ('f:' || u.flow, true),
                             ('g:' || coalesce(u.grp, u.flow),
                              coalesce(u.grp, u.flow) = u.flow
                              OR NOT EXISTS (SELECT 1 FROM grp g WHERE g.group_id = u.grp))) AS k (name, wanted)
        WHERE k.wanted AND NOT EXISTS (SELECT 1 FROM flow f WHERE f.flow_id = u.flow)
        ORDER BY 1
        ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name WHERE false;
        -- Migration 019: the stored tick, read again now that the
        -- call holds its rows (it may have waited for them).
$a$),
    ('enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])', $a$                MESSAGE = 'enqueue: the stores tick moved past the calls ten times while it waited for flows or groups other transactions were making; nothing was changed, try again';
$a$,
     $a$                MESSAGE = 'enqueue: ten times in a row the call met a flow or an id that another transaction wrote at a tick past the call''s while it ran (migrations 038, 039); nothing was changed, try again';
$a$),
    ('enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)', $a$        -- Migration 021: a flow's name taken (another transaction making
        -- the flow may have been waited for, and its tick committed): the
        -- stored tick, read again. Past v_at, the caller starts over or
        -- answers clock_regressed (enqueue_many's FR001 handler).
        IF v_named THEN
            SELECT sc.tick INTO v_now FROM stored_clock sc;
            IF v_now > v_at THEN
                RAISE EXCEPTION USING ERRCODE = 'FR001', DETAIL = format('%s %s', v_at, v_now),
                    MESSAGE = format('enqueue at tick %s: the store is at tick %s', v_at, v_now);
            END IF;
        END IF;
$a$,
     $a$        -- Migration 039: not read again after a name; enqueue_many took
        -- every name before it read the tick.
$a$)
        ) AS v (fn, anchor, patch) WHERE v.fn = target LOOP
            IF (length(def) - length(replace(def, p.anchor, ''))) / length(p.anchor) <> 1 THEN
                RAISE EXCEPTION 'migration 039: % does not hold its anchor exactly once: %', target, p.anchor;
            END IF;
            def := replace(def, p.anchor, p.patch);
        END LOOP;
        EXECUTE def;
    END LOOP;
END
$mig$;
