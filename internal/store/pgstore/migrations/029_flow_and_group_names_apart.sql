-- 029: a flow's name and a group's name are claimed apart.
--
-- SPEC §10: two transactions that enqueue to different flows never wait for
-- each other. A flow without a group joins the group named like it (SPEC
-- §8), so making such a flow claims both names; but a flow made in another
-- group claims only its flow name and that group's, and a configure only
-- its group's. Since migration 012 every claim was a row of name_claim keyed
-- by the bare name, so a transaction making flow N of group G1 and one
-- making flow M of a new group N, or configuring group N, waited for each
-- other (a breaker's report). Claims are now keyed 'f:' || flow and
-- 'g:' || group (a flow's key before its group's, so one event's claims
-- come in one order); the rows of bare names left in name_claim are never
-- claimed again.
--
-- And a grouped enqueue locked the flow row named like its group up front,
-- since an ungrouped flow of that name is the group's own state until the
-- group has a row (it then becomes the group's first member). A flow of
-- that name in another group is not: it is locked only while it has no
-- group (group_id IS NULL); a flow's group is fixed otherwise, so the test
-- read again after a wait (FOR NO KEY UPDATE re-checks the row) is exact.
-- configure locks it the same way (pgstore's configureGroup).
--
-- Restated from the functions' own definitions with anchors that must each
-- occur exactly once (checked); run again, nothing changes.
DO $mig$
DECLARE
    f_name TEXT;
    def    TEXT;
    p      RECORD;
BEGIN
    -- Each (function, anchor, patch): enqueue_events' up-front locks and
    -- names; enqueue_many's up-front locks before enqueue_events, the one
    -- event's new flow, and a batch's new flows (no group named: each its
    -- own group's name too).
    FOREACH f_name IN ARRAY ARRAY['enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)',
                                  'enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])'] LOOP
        SELECT pg_get_functiondef(f.oid) INTO def FROM pg_proc f WHERE f.oid = f_name::regprocedure;
        CONTINUE WHEN position('Migration 029:' IN def) > 0;
        FOR p IN SELECT v.anchor, v.patch FROM (VALUES
        ('enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)',
$a$        WHERE f.flow_id = p_flows[1] OR f.flow_id = p_groups[1]
$a$,
$a$        WHERE f.flow_id = p_flows[1]
           /* Migration 029: the flow named like the group only while it has none. */
           OR (f.flow_id = p_groups[1] AND f.group_id IS NULL)
$a$),
        ('enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)',
$a$        WHERE f.flow_id = ANY (p_flows || coalesce(p_groups, '{}')
                               || ARRAY(SELECT e.flow_id FROM event e WHERE e.event_id = ANY (p_ids))
                               || ARRAY(SELECT t.flow_id FROM tombstone t WHERE t.event_id = ANY (p_ids)))
$a$,
$a$        WHERE f.flow_id = ANY (p_flows
                               || ARRAY(SELECT e.flow_id FROM event e WHERE e.event_id = ANY (p_ids))
                               || ARRAY(SELECT t.flow_id FROM tombstone t WHERE t.event_id = ANY (p_ids)))
           /* Migration 029: the flows named like the groups only while they have none. */
           OR (f.flow_id = ANY (coalesce(p_groups, '{}')) AND f.group_id IS NULL)
$a$),
        ('enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)',
$a$        IF coalesce(p_groups[i], p_flows[i]) = p_flows[i]
           OR EXISTS (SELECT 1 FROM grp g WHERE g.group_id = p_groups[i]) THEN
            PERFORM lock_name(p_flows[i]);
        ELSE
            PERFORM lock_name(least(p_flows[i], p_groups[i]));
            PERFORM lock_name(greatest(p_flows[i], p_groups[i]));
        END IF;
$a$,
$a$        -- Migration 029: a flow's name and a group's apart, the flow's
        -- first; a flow of no group makes the group named like it too.
        IF coalesce(p_groups[i], p_flows[i]) = p_flows[i] THEN
            PERFORM lock_name('f:' || p_flows[i]);
            PERFORM lock_name('g:' || p_flows[i]);
        ELSIF EXISTS (SELECT 1 FROM grp g WHERE g.group_id = p_groups[i]) THEN
            PERFORM lock_name('f:' || p_flows[i]);
        ELSE
            PERFORM lock_name('f:' || p_flows[i]);
            PERFORM lock_name('g:' || p_groups[i]);
        END IF;
$a$),
        ('enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])',
$a$        WHERE f.flow_id = ANY (p_flows || coalesce(p_groups, '{}')
                               || ARRAY(SELECT e.flow_id FROM event e WHERE e.event_id = ANY (p_ids))
                               || ARRAY(SELECT t.flow_id FROM tombstone t WHERE t.event_id = ANY (p_ids)))
$a$,
$a$        WHERE f.flow_id = ANY (p_flows
                               || ARRAY(SELECT e.flow_id FROM event e WHERE e.event_id = ANY (p_ids))
                               || ARRAY(SELECT t.flow_id FROM tombstone t WHERE t.event_id = ANY (p_ids)))
           /* Migration 029: the flows named like the groups only while they have none. */
           OR (f.flow_id = ANY (coalesce(p_groups, '{}')) AND f.group_id IS NULL)
$a$),
        ('enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])',
$a$                        PERFORM lock_name(p_flows[1]);
$a$,
$a$                        /* Migration 029: the flow's name, then its group's. */
                        PERFORM lock_name('f:' || p_flows[1]);
                        PERFORM lock_name('g:' || p_flows[1]);
$a$),
        ('enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])',
$a$            SELECT DISTINCT u.flow FROM unnest(p_flows) AS u (flow)
            WHERE NOT EXISTS (SELECT 1 FROM flow f WHERE f.flow_id = u.flow)
$a$,
$a$            /* Migration 029: each new flow's name and its group's. */
            SELECT DISTINCT k.name FROM unnest(p_flows) AS u (flow),
                LATERAL (VALUES ('f:' || u.flow), ('g:' || u.flow)) AS k (name)
            WHERE NOT EXISTS (SELECT 1 FROM flow f WHERE f.flow_id = u.flow)
$a$)
        ) AS v (fn, anchor, patch) WHERE v.fn = f_name LOOP
            IF (length(def) - length(replace(def, p.anchor, ''))) / length(p.anchor) <> 1 THEN
                RAISE EXCEPTION 'migration 029: %''s definition does not hold its anchor exactly once: %', f_name, p.anchor;
            END IF;
            def := replace(def, p.anchor, p.patch);
        END LOOP;
        EXECUTE def;
    END LOOP;
END
$mig$;
