-- 022: a grouped call making a new flow no longer meets the same deadlock
-- in every attempt (SPEC §10: a call waits, then answers, never fails with
-- deadlock_detected). enqueue_events made a new flow, its group's rows and
-- its event inside a nested block (a subtransaction, so that the rows could
-- be rolled back when the id turned out to be stored meanwhile). The block
-- committed into the attempt of enqueue_many that called it, and
-- PostgreSQL releases a subtransaction's own lock when it ends: a
-- transaction that then waited for the new event (the same id) waited for
-- the whole transaction instead, which ending the attempt does not end.
-- A one-event call making flow X for that id, while the batch went on to
-- wait for X's name, made a cycle that the deadlock detector broke by
-- ending the batch's attempt, ten times over, and the batch failed.
--
-- Now the event is inserted first, in the attempt itself, with the
-- foreign key to its flow deferred to the end of the step, and the flow
-- and group rows are made only once it is in: nothing to roll back, no
-- nested block. The foreign key becomes DEFERRABLE (INITIALLY IMMEDIATE:
-- every other statement checks it as before).
--
-- enqueue_events is restated from its own definition with anchors that
-- must each occur exactly once (checked); run again, it changes nothing.
DO $mig$
DECLARE
    def TEXT;
    fk  TEXT;
    old_step CONSTANT TEXT := $o$            -- The flow (and its group) made here, and the event, in a
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
$o$;
    new_step CONSTANT TEXT := $n$            -- Migration 022: the event first, its flow's foreign key
            -- checked at the end of this step (deferred), and the flow and
            -- its group made only once the event is in: when another
            -- transaction stored the same id meanwhile, the answer is
            -- existing or conflict and nothing was made (SPEC §2). This
            -- step stood in a block of its own, which rolled the flow and
            -- group rows back; but the block was a subtransaction that
            -- committed into the call's attempt, and a transaction that
            -- then met the new event waited for this whole transaction,
            -- not for the attempt. When the deadlock detector ended the
            -- attempt, the other still waited, each attempt met the same
            -- deadlock, and after ten the call failed with
            -- deadlock_detected (SPEC §10: a call answers; seen in CI, a
            -- grouped batch against a one-event call making a new flow).
            SET CONSTRAINTS event_flow_id_fkey DEFERRED;
            INSERT INTO event (event_id, flow_id, seq, body, own_state, generation, attempts, lifetime_attempts,
                               reason, next_at, lease_until, enqueued_at)
            VALUES (p_ids[i], p_flows[i], 1, p_bodies[i], 'ready', 0, 0, 0, NULL, v_at, 0, v_at)
            ON CONFLICT (event_id) DO NOTHING;
            IF FOUND THEN
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
                IF NOT FOUND THEN
                    -- Not seen: this call holds the flow's name. Start over
                    -- (enqueue_many's attempts), seeing the flow.
                    RAISE EXCEPTION USING ERRCODE = 'unique_violation',
                        MESSAGE = format('flow %s was made by another transaction while this one held its name', quote_literal(p_flows[i]));
                END IF;
                new_seq := 1;
                v_inserted := true;
            ELSE
                v_undone := true;
            END IF;
            SET CONSTRAINTS event_flow_id_fkey IMMEDIATE;
$n$;
BEGIN
    SELECT c.conname INTO fk FROM pg_constraint c
    WHERE c.conrelid = 'event'::regclass AND c.contype = 'f' AND c.confrelid = 'flow'::regclass;
    IF fk IS NULL THEN
        RAISE EXCEPTION 'migration 022: the event table has no foreign key to flow';
    END IF;
    IF fk <> 'event_flow_id_fkey' THEN
        EXECUTE format('ALTER TABLE event RENAME CONSTRAINT %I TO event_flow_id_fkey', fk);
    END IF;
    ALTER TABLE event ALTER CONSTRAINT event_flow_id_fkey DEFERRABLE INITIALLY IMMEDIATE;

    SELECT pg_get_functiondef(p.oid) INTO def
    FROM pg_proc p
    WHERE p.oid = 'enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)'::regprocedure;
    IF position('Migration 022:' IN def) = 0 THEN
        IF (length(def) - length(replace(def, old_step, ''))) / length(old_step) <> 1 THEN
            RAISE EXCEPTION 'migration 022: enqueue_events''s definition does not hold its anchor exactly once';
        END IF;
        def := replace(def, old_step, new_step);
        EXECUTE def;
    END IF;
END
$mig$;
