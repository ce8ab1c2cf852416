-- 038: an enqueue never writes or answers at a tick older than a row it met.
--
-- An enqueue at the store's tick (at NULL, or p_floor) reads the tick, then
-- takes its rows. Another transaction could commit a write at a later tick
-- in between onto a row the call then depended on, and the call went on at
-- the tick it had read (SPEC §2: the store's tick is the largest of its
-- writes; a flow's events come in tick order):
--   - the common call's statement appended to a flow another transaction
--     had advanced meanwhile: the flow's event at seq 3 enqueued at a tick
--     before its event at seq 2;
--   - enqueue_events (a grouped call, a batch that meets a limit or a
--     pruned id) appended to a flow made meanwhile (after enqueue_many's
--     locks, before its own), or answered existing or conflict for an id
--     stored meanwhile, at the old tick (a breaker's stress run: a flow's
--     enqueued_at fell as seq rose in 4 of 5 runs);
--   - the set-based batch answered existing or conflict for an id stored
--     meanwhile at the old tick.
-- Each now meets such a row as a moved tick: the common call goes the
-- general way, which reads the tick again after its locks (migration 019);
-- enqueue_events raises FR001 and the batch FR003, and enqueue_many starts
-- over at the tick read again, or answers clock_regressed for an explicit
-- at, as it does for a moved tick after a name (migration 021).
-- TestPostgresEnqueueNeverBehindATickCommittedMeanwhile holds each case.
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
        CONTINUE WHEN position('Migration 038:' IN def) > 0;
        FOR p IN SELECT v.anchor, v.patch FROM (VALUES
    ('enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])', $a$                WHERE f.flow_id = p_flows[1] AND f.group_id IS NULL
                  AND NOT EXISTS (SELECT 1 FROM event e WHERE e.event_id = p_ids[1])
$a$,
     $a$                WHERE f.flow_id = p_flows[1] AND f.group_id IS NULL
                  /* Migration 038: not advanced past the tick read. */ AND f.tick <= v_at
                  AND NOT EXISTS (SELECT 1 FROM event e WHERE e.event_id = p_ids[1])
$a$),
    ('enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])', $a$                RAISE EXCEPTION USING ERRCODE = 'FR003';
            END IF;
            EXIT;
$a$,
     $a$                RAISE EXCEPTION USING ERRCODE = 'FR003';
            END IF;
            -- Migration 038: an id another transaction stored after the
            -- tick was read, answered at that tick: start over.
            IF EXISTS (SELECT 1 FROM event e WHERE e.event_id = ANY (p_ids) AND e.enqueued_at > v_at) THEN
                RAISE EXCEPTION USING ERRCODE = 'FR003';
            END IF;
            EXIT;
$a$),
    ('enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)', $a$        SELECT f.flow_id IS NOT NULL AS has_flow, f.seq AS f_seq, f.head_seq AS f_head, f.group_id AS f_group,
               e.event_id IS NOT NULL AS known, e.flow_id AS e_flow, e.seq AS e_seq, e.body = p_bodies[i] AS e_same_body,
$a$,
     $a$        SELECT f.flow_id IS NOT NULL AS has_flow, f.seq AS f_seq, f.head_seq AS f_head, f.group_id AS f_group,
               f.tick AS f_tick, e.enqueued_at AS e_tick, /* Migration 038 */
               e.event_id IS NOT NULL AS known, e.flow_id AS e_flow, e.seq AS e_seq, e.body = p_bodies[i] AS e_same_body,
$a$),
    ('enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)', $a$                    MESSAGE = format('enqueue at tick %s: the store is at tick %s', v_at, v_now);
            END IF;
        END IF;
        -- The group first (SPEC §8: before existing, conflict and every
$a$,
     $a$                    MESSAGE = format('enqueue at tick %s: the store is at tick %s', v_at, v_now);
            END IF;
        END IF;
        -- Migration 038: its flow, or its id's event, written at a tick past
        -- the call's by a transaction that committed after the call read the
        -- store's tick (a flow made or advanced after enqueue_many's locks,
        -- an id stored meanwhile): the caller starts over at the tick read
        -- again, or answers clock_regressed.
        IF (pr.has_flow AND pr.f_tick > v_at) OR (pr.known AND pr.e_tick > v_at) THEN
            v_now := greatest(CASE WHEN pr.has_flow THEN pr.f_tick END, CASE WHEN pr.known THEN pr.e_tick END);
            RAISE EXCEPTION USING ERRCODE = 'FR001', DETAIL = format('%s %s', v_at, v_now),
                MESSAGE = format('enqueue at tick %s: the store is at tick %s', v_at, v_now);
        END IF;
        -- The group first (SPEC §8: before existing, conflict and every
$a$),
    ('enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)', $a$                        SELECT o.ord, o.served INTO fr
                        FROM flow o WHERE o.flow_id = v_group AND o.group_id IS NULL FOR NO KEY UPDATE;
                        IF FOUND THEN
$a$,
     $a$                        SELECT o.ord, o.served, o.tick INTO fr
                        FROM flow o WHERE o.flow_id = v_group AND o.group_id IS NULL FOR NO KEY UPDATE;
                        IF FOUND THEN
                            -- Migration 038: the flow that becomes the group's first
                            -- member, written past the call's tick meanwhile.
                            IF fr.tick > v_at THEN
                                RAISE EXCEPTION USING ERRCODE = 'FR001', DETAIL = format('%s %s', v_at, fr.tick),
                                    MESSAGE = format('enqueue at tick %s: the store is at tick %s', v_at, fr.tick);
                            END IF;
$a$),
    ('enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)', $a$        SELECT e.flow_id AS e_flow, e.seq AS e_seq, e.body = p_bodies[i] AS e_same_body INTO fr FROM event e WHERE e.event_id = p_ids[i];
        IF v_undone THEN
$a$,
     $a$        SELECT e.flow_id AS e_flow, e.seq AS e_seq, e.body = p_bodies[i] AS e_same_body, e.enqueued_at AS e_tick INTO fr FROM event e WHERE e.event_id = p_ids[i];
        IF fr.e_tick > v_at THEN
            -- Migration 038: stored meanwhile at a tick past the call's.
            RAISE EXCEPTION USING ERRCODE = 'FR001', DETAIL = format('%s %s', v_at, fr.e_tick),
                MESSAGE = format('enqueue at tick %s: the store is at tick %s', v_at, fr.e_tick);
        END IF;
        IF v_undone THEN
$a$)
        ) AS v (fn, anchor, patch) WHERE v.fn = target LOOP
            IF (length(def) - length(replace(def, p.anchor, ''))) / length(p.anchor) <> 1 THEN
                RAISE EXCEPTION 'migration 038: % does not hold its anchor exactly once: %', target, p.anchor;
            END IF;
            def := replace(def, p.anchor, p.patch);
        END LOOP;
        EXECUTE def;
    END LOOP;
END
$mig$;
