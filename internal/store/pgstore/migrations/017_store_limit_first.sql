-- 017: a call under the store's backlog limit takes the store's limit row
-- before anything else (see the function's first statement); migration
-- 015's enqueue_events otherwise. CREATE OR REPLACE resets its settings,
-- set again at the end.
CREATE OR REPLACE FUNCTION enqueue_events(p_ids TEXT[], p_flows TEXT[], p_bodies BYTEA[], p_groups TEXT[], v_at BIGINT,
                               v_new_served BIGINT, v_max_backlog BIGINT, v_max_flow_backlog BIGINT)
RETURNS TABLE (status TEXT, seq BIGINT, "limit" TEXT)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    n        INTEGER := coalesce(cardinality(p_ids), 0);
    r_status TEXT[] := '{}';
    r_seq    BIGINT[] := '{}';
    r_limit  TEXT[] := '{}';
    full_flows  TEXT[] := '{}';
    full_limits TEXT[] := '{}';
    pr       RECORD;
    fr       RECORD;
    gl       RECORD;
    v_group  TEXT;
    v_member TEXT;
    v_full   TEXT;
    v_store_counted BOOLEAN;
    v_group_counted BOOLEAN;
    new_seq  BIGINT;
    woke     BOOLEAN := false;
    woke_one BOOLEAN;
    v_inserted BOOLEAN;
    v_undone   BOOLEAN;
    v_named    BOOLEAN;
BEGIN
    -- The store's limit row first, while the store has a limit (migration
    -- 017): every call under it takes the row, and before its flows and
    -- any group's limit row, so calls wait for each other in one order.
    -- Taken in the limits check below, after the flows and after a new
    -- flow's group limit row, it made a lock cycle: a transaction holding
    -- the store's row waited for a group's row that a call making a new
    -- flow of that group held while it waited for the store's row (a
    -- breaker's run: every time, resolved only by the deadlock detector
    -- after deadlock_timeout, and configure and EnqueueTx failing with
    -- deadlock_detected under load). A configure setting the store's first
    -- limit is ordered by the flow table's lock (enqueue_many), not by
    -- this row.
    IF v_max_backlog > 0 THEN
        PERFORM 1 FROM settings s WHERE s.id = 1 AND s.max_backlog > 0 FOR NO KEY UPDATE;
    END IF;
    -- Its flows, the flows of its known or pruned ids, and the flows named
    -- like its groups, locked first, in flow_id order.
    IF n = 1 THEN
        PERFORM 1 FROM flow f
        WHERE f.flow_id = p_flows[1] OR f.flow_id = p_groups[1]
           OR f.flow_id = (SELECT e.flow_id FROM event e WHERE e.event_id = p_ids[1])
           OR f.flow_id = (SELECT t.flow_id FROM tombstone t WHERE t.event_id = p_ids[1])
        ORDER BY f.flow_id FOR NO KEY UPDATE;
    ELSE
        PERFORM 1 FROM flow f
        WHERE f.flow_id = ANY (p_flows || coalesce(p_groups, '{}')
                               || ARRAY(SELECT e.flow_id FROM event e WHERE e.event_id = ANY (p_ids))
                               || ARRAY(SELECT t.flow_id FROM tombstone t WHERE t.event_id = ANY (p_ids)))
        ORDER BY f.flow_id FOR NO KEY UPDATE;
    END IF;
    FOR i IN 1 .. n LOOP
        -- One read for what the event's answer depends on: its flow (locked
        -- above, or created since by this call), the event of its id, the
        -- tombstone of its id, and the limit of the group the flow is in or
        -- would join. A flow that does not exist yet: its name, and its
        -- group's, locked (lock_name), then its row if another
        -- transaction made it meanwhile, and read again (migration 011).
        v_named := false;
        LOOP
        SELECT f.flow_id IS NOT NULL AS has_flow, f.seq AS f_seq, f.head_seq AS f_head, f.group_id AS f_group,
               e.event_id IS NOT NULL AS known, e.flow_id AS e_flow, e.seq AS e_seq, e.body = p_bodies[i] AS e_same_body,
               t.event_id IS NOT NULL AS pruned, t.flow_id AS t_flow, t.seq AS t_seq,
               t.body_sha256 = sha256(p_bodies[i]) AS t_same_body,
               coalesce(l.max_backlog, 0) AS g_max
        INTO pr
        FROM (SELECT 1) one
        LEFT JOIN flow f ON f.flow_id = p_flows[i]
        LEFT JOIN event e ON e.event_id = p_ids[i]
        LEFT JOIN tombstone t ON t.event_id = p_ids[i] AND e.event_id IS NULL
        LEFT JOIN grp_limit l ON l.group_id = coalesce(f.group_id, f.flow_id, p_groups[i], p_flows[i]);
        EXIT WHEN pr.has_flow OR v_named;
        -- The two names in one order, whoever takes them; a group that
        -- exists already is not locked (its grp_limit row orders a
        -- configure against this enqueue, and new flows of one group must
        -- not wait for each other, SPEC §10).
        IF coalesce(p_groups[i], p_flows[i]) = p_flows[i]
           OR EXISTS (SELECT 1 FROM grp g WHERE g.group_id = p_groups[i]) THEN
            PERFORM lock_name(p_flows[i]);
        ELSE
            PERFORM lock_name(least(p_flows[i], p_groups[i]));
            PERFORM lock_name(greatest(p_flows[i], p_groups[i]));
        END IF;
        PERFORM 1 FROM flow f WHERE f.flow_id = p_flows[i] FOR NO KEY UPDATE;
        -- The limit row of the group the new flow would join, held from
        -- here, before the limit is read again (migration 012): a
        -- configure that sets the group's first limit counts the group's
        -- flows, which do not include this one until it is inserted, so
        -- it must wait for this transaction, or this one see its limit.
        -- Taken later, a configure that committed in between counted
        -- neither this event nor let it count itself (a breaker's stress
        -- run: a group's count one below its backlog).
        -- FOR NO KEY UPDATE where the group has a limit, which the check
        -- below locks so: taken as a share lock first, two calls of one
        -- limited group each waited for the other's (migration 015).
        IF pr.g_max > 0 THEN
            PERFORM 1 FROM grp_limit l WHERE l.group_id = coalesce(p_groups[i], p_flows[i]) FOR NO KEY UPDATE;
        ELSE
            PERFORM 1 FROM grp_limit l WHERE l.group_id = coalesce(p_groups[i], p_flows[i]) FOR SHARE;
        END IF;
        v_named := true;
        END LOOP;
        -- The group first (SPEC §8: before existing, conflict and every
        -- limit).
        IF pr.has_flow AND p_groups[i] IS NOT NULL AND p_groups[i] <> coalesce(pr.f_group, p_flows[i]) THEN
            RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = 'group',
                MESSAGE = format('flow %s belongs to group %s; a flow''s group is fixed by the enqueue that created it',
                                 quote_literal(p_flows[i]), quote_literal(coalesce(pr.f_group, p_flows[i])));
        END IF;
        IF pr.has_flow THEN
            v_group := coalesce(pr.f_group, p_flows[i]);
        ELSE
            v_group := coalesce(p_groups[i], p_flows[i]);
        END IF;
        IF pr.known OR pr.pruned THEN
            -- A known id, or one a prune left a tombstone of (SPEC §8:
            -- idempotency outlives the body): nothing changes but the tick,
            -- recorded on its flow.
            UPDATE flow f SET tick = v_at WHERE f.flow_id = coalesce(pr.e_flow, pr.t_flow) AND f.tick < v_at;
            IF (pr.known AND pr.e_flow = p_flows[i] AND pr.e_same_body) OR (pr.pruned AND pr.t_flow = p_flows[i] AND pr.t_same_body) THEN
                r_status := r_status || 'existing'::text; r_seq := r_seq || coalesce(pr.e_seq, pr.t_seq);
            ELSE
                r_status := r_status || 'conflict'::text; r_seq := r_seq || NULL::bigint;
            END IF;
            r_limit := r_limit || NULL::text;
            CONTINUE;
        END IF;
        -- The limits (SPEC §8), store, group, flow, in that order: a
        -- limit's row is locked only while the limit is set, and a full
        -- answer records its tick there. A flow that answered full in this
        -- call answers full again, whatever acks committed since (its
        -- later event must not overtake the refused one), naming the first
        -- limit that applies now, else the one it answered before.
        v_full := NULL;
        v_store_counted := false;
        v_group_counted := false;
        IF v_max_backlog > 0 THEN
            SELECT s.max_backlog, s.enqueued INTO gl FROM settings s WHERE s.id = 1 AND s.max_backlog > 0 FOR NO KEY UPDATE;
            IF FOUND THEN
                IF gl.enqueued - (SELECT c.acked FROM clock c WHERE c.id = 3) >= gl.max_backlog THEN
                    UPDATE settings s SET tick = v_at WHERE s.id = 1 AND s.tick < v_at;
                    v_full := 'store';
                ELSE
                    v_store_counted := true;
                END IF;
            END IF;
        END IF;
        IF v_full IS NULL AND pr.g_max > 0 THEN
            SELECT l.max_backlog, l.enqueued INTO gl FROM grp_limit l WHERE l.group_id = v_group AND l.max_backlog > 0 FOR NO KEY UPDATE;
            IF FOUND THEN
                IF gl.enqueued - coalesce((SELECT a.acked FROM grp_acked a WHERE a.group_id = v_group), 0) >= gl.max_backlog THEN
                    UPDATE grp_limit l SET tick = v_at WHERE l.group_id = v_group AND l.tick < v_at;
                    v_full := 'group';
                ELSE
                    v_group_counted := true;
                END IF;
            END IF;
        END IF;
        IF v_full IS NULL AND pr.has_flow AND v_max_flow_backlog > 0 AND pr.f_seq - pr.f_head + 1 >= v_max_flow_backlog THEN
            UPDATE flow f SET tick = v_at WHERE f.flow_id = p_flows[i] AND f.tick < v_at;
            v_full := 'flow';
        END IF;
        IF v_full IN ('store', 'group') AND EXISTS (SELECT 1 FROM event e WHERE e.event_id = p_ids[i]) THEN
            -- A limit's row was waited for, and the transaction that held
            -- it stored this id: existing or conflict come before every
            -- limit (SPEC §8). The insert below meets the id and answers
            -- so, as for any id stored meanwhile.
            v_full := NULL;
        END IF;
        IF v_full IS NULL AND p_flows[i] = ANY (full_flows) THEN
            v_full := full_limits[array_position(full_flows, p_flows[i])];
        END IF;
        IF v_full IS NOT NULL THEN
            r_status := r_status || 'full'::text; r_seq := r_seq || NULL::bigint; r_limit := r_limit || v_full;
            full_flows := full_flows || p_flows[i]; full_limits := full_limits || v_full;
            CONTINUE;
        END IF;
        new_seq := pr.f_seq + 1;
        v_inserted := false;
        v_undone := false;
        IF NOT pr.has_flow THEN
            -- The flow (and its group) made here, and the event, in a
            -- subtransaction: when another transaction stored the same id
            -- meanwhile, the answer is existing or conflict and nothing
            -- may change (SPEC §2), so the flow and group rows made for it
            -- are rolled back with it (FR004 is raised only to do that).
            BEGIN
                -- A new flow (at the back of the rotation under the fair rule),
                -- in its group: its own when the group is named like it and has
                -- no row; else the group's row, made when missing (a flow named
                -- like the group that is its own group becomes its first
                -- member, and the group takes its place in the rotation), or
                -- given its place when it has none yet (configured before any
                -- flow). A flow another transaction created meanwhile is waited
                -- for and read.
                v_member := NULL;
                IF v_group <> p_flows[i] OR EXISTS (SELECT 1 FROM grp g WHERE g.group_id = v_group) THEN
                    v_member := v_group;
                    IF NOT EXISTS (SELECT 1 FROM grp g WHERE g.group_id = v_group) THEN
                        SELECT o.ord, o.served INTO fr
                        FROM flow o WHERE o.flow_id = v_group AND o.group_id IS NULL FOR NO KEY UPDATE;
                        IF FOUND THEN
                            INSERT INTO grp (group_id, ord, served) VALUES (v_group, fr.ord, fr.served) ON CONFLICT DO NOTHING;
                            UPDATE flow o SET group_id = v_group, runnable = false,
                                wait_until = CASE WHEN o.runnable THEN v_at ELSE o.wait_until END
                            WHERE o.flow_id = v_group;
                        ELSE
                            INSERT INTO grp (group_id, ord, served) VALUES (v_group, nextval('flow_ord'), v_new_served) ON CONFLICT DO NOTHING;
                        END IF;
                        INSERT INTO grp_limit (group_id) VALUES (v_group) ON CONFLICT DO NOTHING;
                        INSERT INTO grp_acked (group_id) VALUES (v_group) ON CONFLICT DO NOTHING;
                    ELSE
                        UPDATE grp g SET ord = nextval('flow_ord'), served = v_new_served WHERE g.group_id = v_group AND g.ord = 0;
                    END IF;
                    -- A configure that sets the group's first limit waits for
                    -- this transaction, or this one sees its limit.
                    PERFORM 1 FROM grp_limit l WHERE l.group_id = v_group FOR SHARE;
                END IF;
                INSERT INTO flow (flow_id, ord, seq, served, head_seq, runnable, wait_until, tick, group_id)
                VALUES (p_flows[i], nextval('flow_ord'), 0, v_new_served, 1, false, NULL, v_at, v_member)
                ON CONFLICT (flow_id) DO NOTHING;
                SELECT f.seq INTO fr FROM flow f WHERE f.flow_id = p_flows[i] FOR NO KEY UPDATE;
                new_seq := fr.seq + 1;
                INSERT INTO event (event_id, flow_id, seq, body, own_state, generation, attempts, lifetime_attempts,
                                   reason, next_at, lease_until, enqueued_at)
                VALUES (p_ids[i], p_flows[i], new_seq, p_bodies[i], 'ready', 0, 0, 0, NULL, v_at, 0, v_at)
                ON CONFLICT (event_id) DO NOTHING;
                IF NOT FOUND THEN
                    RAISE EXCEPTION USING ERRCODE = 'FR004';
                END IF;
                v_inserted := true;
            EXCEPTION WHEN SQLSTATE 'FR004' THEN
                v_undone := true;
            END;
        ELSE
            -- A transaction that inserted the same id first wins; this one
            -- then answers existing or conflict, and the flow is left as it
            -- was (no hole).
            INSERT INTO event (event_id, flow_id, seq, body, own_state, generation, attempts, lifetime_attempts,
                               reason, next_at, lease_until, enqueued_at)
            VALUES (p_ids[i], p_flows[i], new_seq, p_bodies[i], 'ready', 0, 0, 0, NULL, v_at, 0, v_at)
            ON CONFLICT (event_id) DO NOTHING;
            v_inserted := FOUND;
        END IF;
        IF v_inserted THEN
            -- The new event is the head when the flow had none: eligible
            -- now (the wake-up of a drained flow); a member flow in the due
            -- index, due now (a claim counts its group's runnable flows).
            UPDATE flow f SET seq = new_seq,
                runnable = CASE WHEN f.head_seq = new_seq AND f.group_id IS NULL THEN true ELSE f.runnable END,
                wait_until = CASE WHEN f.head_seq <> new_seq THEN f.wait_until
                                  WHEN f.group_id IS NULL THEN NULL ELSE v_at END,
                tick = greatest(f.tick, v_at)
            WHERE f.flow_id = p_flows[i]
            RETURNING f.head_seq = new_seq INTO woke_one;
            woke := woke OR woke_one;
            IF v_store_counted THEN
                UPDATE settings s SET enqueued = s.enqueued + 1 WHERE s.id = 1;
            END IF;
            IF v_group_counted THEN
                UPDATE grp_limit l SET enqueued = l.enqueued + 1 WHERE l.group_id = v_group;
            END IF;
            r_status := r_status || 'created'::text; r_seq := r_seq || new_seq; r_limit := r_limit || NULL::text;
            CONTINUE;
        END IF;
        -- Another transaction stored the id meanwhile: existing or conflict.
        -- The tick goes on this event's own flow, which the call holds:
        -- locking the other one now would take a lock out of order.
        SELECT e.flow_id AS e_flow, e.seq AS e_seq, e.body = p_bodies[i] AS e_same_body INTO fr FROM event e WHERE e.event_id = p_ids[i];
        IF v_undone THEN
            -- The flow was rolled back: the tick goes on the settings row
            -- (the store's tick is the largest of these rows', SPEC §2).
            UPDATE settings s SET tick = v_at WHERE s.id = 1 AND s.tick < v_at;
        ELSE
            UPDATE flow f SET tick = v_at WHERE f.flow_id = p_flows[i] AND f.tick < v_at;
        END IF;
        IF fr.e_flow = p_flows[i] AND fr.e_same_body THEN
            r_status := r_status || 'existing'::text; r_seq := r_seq || fr.e_seq;
        ELSE
            r_status := r_status || 'conflict'::text; r_seq := r_seq || NULL::bigint;
        END IF;
        r_limit := r_limit || NULL::text;
    END LOOP;
    IF woke THEN
        PERFORM pg_notify(CASE WHEN octet_length(current_schema()) <= 53 THEN 'fairrelay_' || current_schema()
                               ELSE 'fairrelay_' || md5(current_schema()) END, '');
    END IF;
    RETURN QUERY SELECT a.status, a.seq, a.lim FROM unnest(r_status, r_seq, r_limit) AS a (status, seq, lim);
END
$$;

ALTER FUNCTION enqueue_events(TEXT[], TEXT[], BYTEA[], TEXT[], BIGINT, BIGINT, BIGINT, BIGINT) SET enable_seqscan = off;
ALTER FUNCTION enqueue_events(TEXT[], TEXT[], BYTEA[], TEXT[], BIGINT, BIGINT, BIGINT, BIGINT) SET jit = off;
