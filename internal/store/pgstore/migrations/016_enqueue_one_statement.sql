-- 016: the outbox's common call (one event, no group named, no limit, onto
-- a flow that exists and is its own group, with an id neither stored nor
-- pruned) locks its flow, inserts the event and advances the flow in one
-- statement instead of three. Each statement of PL/pgSQL costs an executor
-- start and end, which was most of the call's server time (BENCHMARKS.md,
-- issue 14): 3 000 calls in a DO block took 238-333 µs a call against
-- 345-400 µs before, on a loaded machine. Same rows, locks and answers:
-- the lock's SKIP LOCKED and its conditions are migration 012's, the
-- insert still yields to a transaction that stored the id first (no row
-- from it, no update, and the answer is existing or conflict below), and
-- the update sees the flow row as the lock read it (one snapshot). The
-- function is 014's otherwise; CREATE OR REPLACE resets its settings, set
-- again at the end.
CREATE OR REPLACE FUNCTION enqueue_many(p_ids TEXT[], p_flows TEXT[], p_bodies BYTEA[], p_at BIGINT DEFAULT NULL,
                             p_floor BOOLEAN DEFAULT false, p_max_tick_jump BIGINT DEFAULT 0,
                             p_max_body_bytes INTEGER DEFAULT 1048576, p_groups TEXT[] DEFAULT NULL)
RETURNS TABLE (status TEXT, seq BIGINT, tick BIGINT, "limit" TEXT)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    n        INTEGER := coalesce(cardinality(p_ids), 0);
    stored   BIGINT;
    v_check  BOOLEAN;
    v_at     BIGINT := p_at;
    v_entry  TEXT;
    v_ticket BIGINT;
    v_new_served BIGINT;
    lim      RECORD;
    bad      RECORD;
    r_status TEXT[];
    r_seq    BIGINT[];
    r_limit  TEXT[];
    all_created BOOLEAN;
    woke     BOOLEAN := false; -- an event of the call is a claimable head
    ex       RECORD;
    fr       RECORD;
    new_seq  BIGINT;
    v_ins    BOOLEAN;  -- the one event was inserted
    v_lost   BOOLEAN;  -- its new flow was rolled back: the id was stored meanwhile
    v_slow   BOOLEAN := false; -- the one event goes event by event after all
    v_made   BOOLEAN;  -- the one event's new flow was inserted by this call
    hd       RECORD;
BEGIN
    IF coalesce(cardinality(p_flows), 0) <> n OR coalesce(cardinality(p_bodies), 0) <> n
       OR (p_groups IS NOT NULL AND cardinality(p_groups) <> n) THEN
        RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = 'ids',
            MESSAGE = format('ids, flows, bodies and groups differ in length (%s, %s, %s, %s)', n, coalesce(cardinality(p_flows), 0),
                             coalesce(cardinality(p_bodies), 0), coalesce(cardinality(p_groups), n));
    END IF;
    -- Before the limits are read: a configure that sets the first store
    -- limit holds the flow table EXCLUSIVE while it counts, so this enqueue
    -- either is counted by it or sees its limit. The store's tick, the
    -- settings and the claim lane's ticket in one statement (each statement
    -- of PL/pgSQL costs an executor start and end).
    LOCK TABLE flow IN ROW SHARE MODE;
    SELECT sc.tick AS stored, s.entry, s.max_backlog, s.max_flow_backlog, c.ticket INTO lim
    FROM stored_clock sc, settings s, clock c WHERE s.id = 1 AND c.id = 1;
    stored := lim.stored;
    -- The clock (SPEC §2, §7).
    IF v_at IS NULL THEN
        v_at := stored;
    ELSIF v_at < stored AND p_floor THEN
        v_at := stored;
    ELSIF v_at < stored THEN
        RAISE EXCEPTION USING ERRCODE = 'FR001', DETAIL = format('%s %s', v_at, stored),
            MESSAGE = format('enqueue at tick %s: the store is at tick %s', v_at, stored);
    ELSIF NOT p_floor AND p_max_tick_jump > 0 AND v_at - stored > p_max_tick_jump THEN
        RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = 'at',
            MESSAGE = format('tick %s is %s ticks ahead of the stored tick %s, more than the policy''s max_tick_jump of %s (a typo would poison the store''s clock)',
                             v_at, v_at - stored, stored, p_max_tick_jump);
    ELSIF v_at > 1152921504606846976 THEN
        RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = 'at',
            MESSAGE = format('must be a tick in [0, 1152921504606846976], got %s', v_at);
    END IF;
    -- The fields, event by event: the first bad one's first bad field.
    -- Ids, flows and groups of printable ASCII with no space at either end
    -- (the common case) pass ident_problem's rule by construction; only a
    -- batch with another one, or with a body out of bounds, is checked in
    -- detail (a call of ident_problem per value costs ~10 µs: it is not
    -- inlined).
    -- One event is checked by plain expressions, which PL/pgSQL evaluates
    -- without the executor.
    IF n = 1 THEN
        v_check := p_ids[1] IS NULL OR octet_length(p_ids[1]) > 200 OR p_ids[1] !~ '^[!-~]([ -~]*[!-~])?$'
                   OR p_flows[1] IS NULL OR octet_length(p_flows[1]) > 200 OR p_flows[1] !~ '^[!-~]([ -~]*[!-~])?$'
                   OR (p_groups IS NOT NULL AND p_groups[1] IS NOT NULL
                       AND (octet_length(p_groups[1]) > 200 OR p_groups[1] !~ '^[!-~]([ -~]*[!-~])?$'))
                   OR p_bodies[1] IS NULL OR octet_length(p_bodies[1]) = 0 OR octet_length(p_bodies[1]) > p_max_body_bytes;
    ELSE
        v_check := EXISTS (SELECT 1 FROM unnest(p_ids || p_flows) AS v (s)
                           WHERE v.s IS NULL OR octet_length(v.s) > 200 OR v.s !~ '^[!-~]([ -~]*[!-~])?$')
                   OR EXISTS (SELECT 1 FROM unnest(p_groups) AS v (s)
                              WHERE v.s IS NOT NULL AND (octet_length(v.s) > 200 OR v.s !~ '^[!-~]([ -~]*[!-~])?$'))
                   OR EXISTS (SELECT 1 FROM unnest(p_bodies) AS b (body)
                              WHERE b.body IS NULL OR octet_length(b.body) = 0 OR octet_length(b.body) > p_max_body_bytes);
    END IF;
    IF v_check THEN
        SELECT u.i AS i,
               CASE WHEN ident_problem(u.id) IS NOT NULL THEN 'id'
                    WHEN ident_problem(u.flow) IS NOT NULL THEN 'flow'
                    WHEN u.grp IS NOT NULL AND ident_problem(u.grp) IS NOT NULL THEN 'group'
                    ELSE 'body' END AS field,
               coalesce(ident_problem(u.id), ident_problem(u.flow), CASE WHEN u.grp IS NOT NULL THEN ident_problem(u.grp) END,
                        CASE WHEN u.body IS NULL OR octet_length(u.body) = 0 THEN 'empty'
                             ELSE format('%s bytes, more than the limit of %s', octet_length(u.body), p_max_body_bytes) END) AS problem
        INTO bad
        FROM unnest(p_ids, p_flows, p_bodies, coalesce(p_groups, array_fill(NULL::text, ARRAY[n]))) WITH ORDINALITY AS u (id, flow, body, grp, i)
        WHERE ident_problem(u.id) IS NOT NULL OR ident_problem(u.flow) IS NOT NULL
           OR (u.grp IS NOT NULL AND ident_problem(u.grp) IS NOT NULL)
           OR u.body IS NULL OR octet_length(u.body) = 0 OR octet_length(u.body) > p_max_body_bytes
        ORDER BY u.i LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = bad.field, MESSAGE = bad.problem;
        END IF;
    END IF;
    v_entry := lim.entry;
    v_ticket := lim.ticket;
    v_new_served := CASE WHEN v_entry = 'fair' THEN v_ticket ELSE 0 END;
    IF n = 1 AND p_groups IS NULL AND lim.max_backlog = 0 AND lim.max_flow_backlog = 0 THEN
        -- The outbox's common call: one event, no group named, no store
        -- limit, onto a flow that exists and is its own group, with an id
        -- neither stored nor pruned. One statement (migration 016) locks
        -- and reads its flow, finding it only in that case (the test comes
        -- before the lock: a known id's flows are locked below, in flow_id
        -- order), inserts the event and advances the flow. Anything else
        -- finds no row and goes the general way below, which answers it.
        WITH lk AS (
            SELECT f.seq + 1 AS new_seq, f.head_seq FROM flow f
            WHERE f.flow_id = p_flows[1] AND f.group_id IS NULL
              AND NOT EXISTS (SELECT 1 FROM event e WHERE e.event_id = p_ids[1])
              AND NOT EXISTS (SELECT 1 FROM tombstone t WHERE t.event_id = p_ids[1])
            FOR NO KEY UPDATE OF f SKIP LOCKED
        ), ins AS (
            INSERT INTO event (event_id, flow_id, seq, body, own_state, generation, attempts, lifetime_attempts,
                               reason, next_at, lease_until, enqueued_at)
            SELECT p_ids[1], p_flows[1], lk.new_seq, p_bodies[1], 'ready', 0, 0, 0, NULL, v_at, 0, v_at FROM lk
            ON CONFLICT (event_id) DO NOTHING
            RETURNING event.seq
        ), upd AS (
            UPDATE flow f SET seq = ins.seq,
                runnable = CASE WHEN f.head_seq = ins.seq THEN true ELSE f.runnable END,
                wait_until = CASE WHEN f.head_seq = ins.seq THEN NULL ELSE f.wait_until END,
                tick = greatest(f.tick, v_at)
            FROM ins WHERE f.flow_id = p_flows[1]
            RETURNING f.head_seq = ins.seq AS woke
        )
        SELECT lk.new_seq, lk.head_seq, (SELECT u.woke FROM upd u) AS woke INTO hd FROM lk;
        IF FOUND THEN
            new_seq := hd.new_seq;
            IF hd.woke IS NOT NULL THEN
                IF hd.woke THEN
                    PERFORM pg_notify(CASE WHEN octet_length(current_schema()) <= 53 THEN 'fairrelay_' || current_schema()
                                           ELSE 'fairrelay_' || md5(current_schema()) END, '');
                END IF;
                status := 'created'; seq := new_seq; tick := v_at; "limit" := NULL;
                RETURN NEXT;
                RETURN;
            END IF;
            -- Stored meanwhile by another transaction: the tick goes on
            -- this event's own flow, which the call holds (locking the
            -- other flow now would take a lock out of order).
            SELECT e.flow_id, e.seq, e.body = p_bodies[1] AS same INTO ex FROM event e WHERE e.event_id = p_ids[1];
            UPDATE flow f SET tick = v_at WHERE f.flow_id = p_flows[1] AND f.tick < v_at;
            IF ex.flow_id = p_flows[1] AND ex.same THEN
                status := 'existing'; seq := ex.seq;
            ELSE
                status := 'conflict'; seq := NULL;
            END IF;
            tick := v_at; "limit" := NULL;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    IF n > 1 AND p_groups IS NULL AND lim.max_backlog = 0 AND lim.max_flow_backlog = 0
       AND NOT EXISTS (SELECT 1 FROM tombstone t WHERE t.event_id = ANY (p_ids))
       AND NOT EXISTS (SELECT 1 FROM grp g WHERE g.group_id = ANY (p_flows))
       AND NOT EXISTS (SELECT 1 FROM flow f JOIN grp_limit l ON l.group_id = f.group_id
                       WHERE f.flow_id = ANY (p_flows) AND l.max_backlog > 0) THEN
        -- A batch with no group named, no limit that applies and no pruned
        -- id, set by set, in one statement: the new events numbered per
        -- flow in batch order (inserted in id order); the flows they
        -- create inserted with their final values (in flow_id order), in
        -- the creation order of their first events (SPEC §7; under the
        -- fair rule a new flow joins at the back of the rotation), the
        -- others advanced (and woken when they had no head: a member flow
        -- in the due index, due now, for a claim to count); the flows of
        -- known ids given the tick. An id or a flow another transaction
        -- created meanwhile (it has committed by the time this one learns
        -- of it), or a deadlock with it, rolls the block back, locks and
        -- all, and the batch starts over, seeing it. The answers stay in
        -- arrays until the statement has completed.
        FOR attempt IN 1 .. 10 LOOP
        BEGIN
            -- The flows of the batch and of its known ids that exist,
            -- locked first, in flow_id order.
            PERFORM 1 FROM flow f
            WHERE f.flow_id = ANY (p_flows || ARRAY(SELECT e.flow_id FROM event e WHERE e.event_id = ANY (p_ids)))
            ORDER BY f.flow_id FOR NO KEY UPDATE;
            -- The names of the flows it may make, claimed in name order
            -- (lock_name, migration 012): a transaction making a flow or a
            -- group of one of these names, or configuring a group of it,
            -- is waited for; one that starts later waits for this one.
            -- A group of one of the names made meanwhile: event by event
            -- below, which answers it (FR005 is raised only to leave).
            INSERT INTO name_claim (name)
            SELECT DISTINCT u.flow FROM unnest(p_flows) AS u (flow)
            WHERE NOT EXISTS (SELECT 1 FROM flow f WHERE f.flow_id = u.flow)
            ORDER BY 1
            ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name WHERE false;
            -- What sent the batch this way, read again now that it holds
            -- its flows (a breaker's report): a group made of one of its
            -- names, a group limit configured on one of its flows' groups,
            -- or a prune of one of its ids, committed while it waited for a
            -- lock. Its known ids' events are held against a prune from
            -- here on (FOR KEY SHARE: a prune skips rows another
            -- transaction holds; a settle's update does not wait for it).
            PERFORM 1 FROM event e WHERE e.event_id = ANY (p_ids) ORDER BY e.event_id FOR KEY SHARE;
            IF EXISTS (SELECT 1 FROM grp g WHERE g.group_id = ANY (p_flows))
               OR EXISTS (SELECT 1 FROM tombstone t WHERE t.event_id = ANY (p_ids))
               OR EXISTS (SELECT 1 FROM flow f JOIN grp_limit l ON l.group_id = f.group_id
                          WHERE f.flow_id = ANY (p_flows) AND l.max_backlog > 0) THEN
                RAISE EXCEPTION USING ERRCODE = 'FR005';
            END IF;
            -- The new flows first, in a statement of their own, in flow_id
            -- order (their creation order, ord, the order their first
            -- events come): every call inserts all its new flows, then all
            -- its new events, each in one order, so two calls never hold a
            -- new row the other waits for in a cycle (the writes of one
            -- statement's data-modifying parts run in no set order). The
            -- statement below then finds every flow existing.
            WITH input AS (
                SELECT u.i, u.id, u.flow FROM unnest(p_ids, p_flows) WITH ORDINALITY AS u (id, flow, i)
            ), firsts AS (
                SELECT DISTINCT ON (x.id) x.i, x.id, x.flow FROM input x ORDER BY x.id, x.i
            ), fresh AS (
                SELECT fr.flow, min(fr.i) AS first_i FROM firsts fr
                WHERE NOT EXISTS (SELECT 1 FROM event e WHERE e.event_id = fr.id)
                  AND NOT EXISTS (SELECT 1 FROM flow fl WHERE fl.flow_id = fr.flow)
                GROUP BY fr.flow
            ), new_flows AS MATERIALIZED (
                SELECT o.flow, nextval('flow_ord') AS ord FROM (SELECT * FROM fresh ORDER BY first_i) AS o
            ), created AS (
                INSERT INTO flow (flow_id, ord, seq, served, head_seq, runnable, wait_until, tick)
                SELECT nf.flow, nf.ord, 0, v_new_served, 1, false, NULL, v_at FROM new_flows nf
                ORDER BY nf.flow
                ON CONFLICT (flow_id) DO NOTHING
                RETURNING flow_id
            )
            SELECT (SELECT count(*) FROM created) = (SELECT count(*) FROM new_flows) INTO all_created;
            IF NOT all_created THEN
                -- A flow this batch meant to create exists now: start over.
                RAISE EXCEPTION USING ERRCODE = 'FR003';
            END IF;
            WITH input AS (
                SELECT u.i, u.id, u.flow, u.body FROM unnest(p_ids, p_flows, p_bodies) WITH ORDINALITY AS u (id, flow, body, i)
            ), firsts AS (
                SELECT DISTINCT ON (x.id) x.i, x.id, x.flow, x.body FROM input x ORDER BY x.id, x.i
            ), known AS (
                SELECT e.event_id, e.flow_id, e.seq, e.body FROM event e WHERE e.event_id = ANY (p_ids)
            ), numbered AS (
                SELECT fr.i, fr.id, fr.flow, fr.body, fl.flow_id IS NOT NULL AS existed,
                       coalesce(fl.seq, 0) + row_number() OVER (PARTITION BY fr.flow ORDER BY fr.i) AS new_seq
                FROM firsts fr LEFT JOIN flow fl ON fl.flow_id = fr.flow
                WHERE NOT EXISTS (SELECT 1 FROM known k WHERE k.event_id = fr.id)
            ), per_flow AS (
                SELECT nb.flow, bool_or(nb.existed) AS existed, min(nb.new_seq) AS first, max(nb.new_seq) AS last, min(nb.i) AS first_i
                FROM numbered nb GROUP BY nb.flow
            ), new_flows AS MATERIALIZED (
                -- Creation order: the order their first events come.
                SELECT o.flow, o.last, nextval('flow_ord') AS ord
                FROM (SELECT pf.flow, pf.last FROM per_flow pf WHERE NOT pf.existed ORDER BY pf.first_i) AS o
            ), created AS (
                INSERT INTO flow (flow_id, ord, seq, served, head_seq, runnable, wait_until, tick)
                SELECT nf.flow, nf.ord, nf.last, v_new_served, 1, true, NULL, v_at
                FROM new_flows nf
                ORDER BY nf.flow -- inserted in flow_id order, as flows are locked: no cycle of waits
                ON CONFLICT (flow_id) DO NOTHING
                RETURNING flow_id
            ), ins AS (
                INSERT INTO event (event_id, flow_id, seq, body, own_state, generation, attempts, lifetime_attempts,
                                   reason, next_at, lease_until, enqueued_at)
                SELECT nb.id, nb.flow, nb.new_seq, nb.body, 'ready', 0, 0, 0, NULL, v_at, 0, v_at FROM numbered nb
                ORDER BY nb.id -- two batches inserting the same new ids wait in one order
                RETURNING event_id
            ), advanced AS (
                UPDATE flow f SET seq = pf.last,
                    runnable = CASE WHEN f.head_seq = pf.first AND f.group_id IS NULL THEN true ELSE f.runnable END,
                    wait_until = CASE WHEN f.head_seq <> pf.first THEN f.wait_until
                                      WHEN f.group_id IS NULL THEN NULL ELSE v_at END,
                    tick = greatest(f.tick, v_at)
                FROM per_flow pf
                WHERE pf.existed AND f.flow_id = pf.flow
                RETURNING f.flow_id, f.head_seq = pf.first AS woke
            ), ticked AS (
                UPDATE flow f SET tick = v_at
                FROM (SELECT DISTINCT k.flow_id FROM known k) AS k
                WHERE f.flow_id = k.flow_id AND f.tick < v_at
                  AND NOT EXISTS (SELECT 1 FROM per_flow pf WHERE pf.flow = k.flow_id)
                RETURNING f.flow_id
            )
            SELECT array_agg(CASE WHEN nb.id IS NOT NULL THEN 'created'
                                  WHEN coalesce(k.flow_id, fr.flow) = x.flow AND coalesce(k.body, fr.body) = x.body THEN 'existing'
                                  ELSE 'conflict' END ORDER BY x.i),
                   array_agg(CASE WHEN nb.id IS NOT NULL THEN nb.new_seq
                                  WHEN coalesce(k.flow_id, fr.flow) = x.flow AND coalesce(k.body, fr.body) = x.body
                                      THEN coalesce(k.seq, (SELECT nb2.new_seq FROM numbered nb2 WHERE nb2.id = x.id)) END ORDER BY x.i),
                   (SELECT count(*) FROM created) = (SELECT count(*) FROM per_flow pf WHERE NOT pf.existed),
                   EXISTS (SELECT 1 FROM created) OR EXISTS (SELECT 1 FROM advanced a WHERE a.woke)
            INTO r_status, r_seq, all_created, woke
            FROM input x
            LEFT JOIN numbered nb ON nb.i = x.i
            LEFT JOIN known k ON k.event_id = x.id
            LEFT JOIN firsts fr ON fr.id = x.id;
            IF NOT all_created THEN
                -- A flow this batch meant to create exists now: start over.
                RAISE EXCEPTION USING ERRCODE = 'FR003';
            END IF;
            EXIT;
        EXCEPTION WHEN unique_violation OR deadlock_detected OR SQLSTATE 'FR003' THEN
            -- Another transaction got there first: start over, after a
            -- random pause as below.
            r_status := NULL;
            woke := false;
            IF attempt = 10 THEN
                RAISE;
            END IF;
            PERFORM pg_sleep(0.005 * attempt + random() * least(0.01 * 2 ^ attempt, 0.5));
        WHEN SQLSTATE 'FR005' THEN
            -- A group, a group limit or a pruned id appeared: event by
            -- event after all.
            r_status := NULL;
            woke := false;
            v_slow := true;
            EXIT;
        END;
        END LOOP;
        IF NOT v_slow THEN
            IF woke THEN
                PERFORM pg_notify(CASE WHEN octet_length(current_schema()) <= 53 THEN 'fairrelay_' || current_schema()
                                       ELSE 'fairrelay_' || md5(current_schema()) END, '');
            END IF;
            RETURN QUERY SELECT a.status, a.seq, v_at, NULL::text FROM unnest(r_status, r_seq) AS a (status, seq);
            RETURN;
        END IF;
    END IF;
    -- Event by event: one event, or a batch that names groups, meets a
    -- limit or a pruned id (enqueue_events). All of it runs in a
    -- subtransaction that starts over when it meets another transaction's
    -- new flows or ids in a deadlock: a call may have to take a lock after
    -- waiting for another (the flow of an id stored meanwhile, after its
    -- name's claim), so no one order of locks holds for every call, and a
    -- call must answer, not fail (SPEC §10; a breaker's report against
    -- 012 as first written, where one event had no retry). The outbox's
    -- common call returned above, without one.
    FOR attempt IN 1 .. 10 LOOP
    BEGIN
    v_slow := false;
    v_ins := false;
    v_lost := false;
        IF n = 1 AND p_groups IS NULL AND lim.max_backlog = 0 AND lim.max_flow_backlog = 0 THEN
            -- One event, no group named, no store limit: the outbox's common
            -- call, in as few statements as it takes (each costs ~20 µs of
            -- PL/pgSQL). Its flow, and the flow of its id if it is known,
            -- locked first, in flow_id order.
            PERFORM 1 FROM flow f
            WHERE f.flow_id = p_flows[1] OR f.flow_id = (SELECT e.flow_id FROM event e WHERE e.event_id = p_ids[1])
            ORDER BY f.flow_id FOR NO KEY UPDATE;
            SELECT e.flow_id, e.seq, e.body = p_bodies[1] AS same INTO ex FROM event e WHERE e.event_id = p_ids[1];
            IF FOUND THEN
                -- A known id: nothing changes but the tick, recorded on its flow.
                UPDATE flow f SET tick = v_at WHERE f.flow_id = ex.flow_id AND f.tick < v_at;
                IF ex.flow_id = p_flows[1] AND ex.same THEN
                    status := 'existing'; seq := ex.seq;
                ELSE
                    status := 'conflict'; seq := NULL;
                END IF;
                tick := v_at; "limit" := NULL;
                RETURN NEXT;
                RETURN;
            END IF;
            SELECT f.seq, f.group_id INTO fr FROM flow f WHERE f.flow_id = p_flows[1] FOR NO KEY UPDATE;
            IF (FOUND AND fr.group_id IS NULL)
               OR (NOT FOUND AND NOT EXISTS (SELECT 1 FROM grp g WHERE g.group_id = p_flows[1])) THEN
                IF NOT EXISTS (SELECT 1 FROM tombstone t WHERE t.event_id = p_ids[1]) THEN
                    v_ins := false;
                    IF NOT FOUND THEN
                        -- A new flow: its name locked (lock_name; a configure of
                        -- a group so named, or another transaction making the
                        -- flow or a group so named, holds it too), then read
                        -- again. Made meanwhile by another transaction (the
                        -- flow, a group of its name, or the id): event by event
                        -- below (migration 011).
                        PERFORM lock_name(p_flows[1]);
                        PERFORM 1 FROM flow f WHERE f.flow_id = p_flows[1] FOR NO KEY UPDATE;
                        v_slow := EXISTS (SELECT 1 FROM flow f WHERE f.flow_id = p_flows[1])
                               OR EXISTS (SELECT 1 FROM grp g WHERE g.group_id = p_flows[1])
                               OR EXISTS (SELECT 1 FROM event e WHERE e.event_id = p_ids[1]);
                    END IF;
                    IF NOT v_slow AND fr IS NULL THEN
                        -- A new flow, its own group (at the back of the
                        -- rotation under the fair rule), and the event. When
                        -- another transaction stored the id meanwhile, the
                        -- answer is existing or conflict and nothing may change
                        -- (SPEC §2): the flow made for it is deleted again (no
                        -- other transaction can have seen it). Migration 010
                        -- rolled it back in a subtransaction instead; each
                        -- took a transaction id and a lock-table entry to
                        -- commit, and one transaction's many new flows made
                        -- every later call slower (migration 012).
                        v_lost := false;
                        INSERT INTO flow (flow_id, ord, seq, served, head_seq, runnable, wait_until, tick)
                        VALUES (p_flows[1], nextval('flow_ord'), 0, v_new_served, 1, false, NULL, v_at)
                        ON CONFLICT (flow_id) DO NOTHING;
                        v_made := FOUND;
                        SELECT f.seq, f.group_id INTO fr FROM flow f WHERE f.flow_id = p_flows[1] FOR NO KEY UPDATE;
                        IF v_made THEN
                            INSERT INTO event (event_id, flow_id, seq, body, own_state, generation, attempts, lifetime_attempts,
                                               reason, next_at, lease_until, enqueued_at)
                            VALUES (p_ids[1], p_flows[1], fr.seq + 1, p_bodies[1], 'ready', 0, 0, 0, NULL, v_at, 0, v_at)
                            ON CONFLICT (event_id) DO NOTHING;
                            IF FOUND THEN
                                v_ins := true;
                            ELSE
                                DELETE FROM flow f WHERE f.flow_id = p_flows[1];
                                v_lost := true;
                            END IF;
                        END IF;
                    IF v_lost THEN
                            -- The tick goes on the settings row (the store's
                            -- tick is the largest of these rows'): the flow is
                            -- gone, and the other one would be locked out of
                            -- order.
                            SELECT e.flow_id, e.seq, e.body = p_bodies[1] AS same INTO ex FROM event e WHERE e.event_id = p_ids[1];
                            UPDATE settings s SET tick = v_at WHERE s.id = 1 AND s.tick < v_at;
                            IF ex.flow_id = p_flows[1] AND ex.same THEN
                                status := 'existing'; seq := ex.seq;
                            ELSE
                                status := 'conflict'; seq := NULL;
                            END IF;
                            tick := v_at; "limit" := NULL;
                            RETURN NEXT;
                            RETURN;
                        END IF;
                    END IF;
                    IF NOT v_slow AND fr.group_id IS NULL THEN
                        new_seq := fr.seq + 1;
                        IF NOT v_ins THEN
                            -- A transaction that inserted the same id first
                            -- wins; this one then answers existing or conflict.
                            INSERT INTO event (event_id, flow_id, seq, body, own_state, generation, attempts, lifetime_attempts,
                                               reason, next_at, lease_until, enqueued_at)
                            VALUES (p_ids[1], p_flows[1], new_seq, p_bodies[1], 'ready', 0, 0, 0, NULL, v_at, 0, v_at)
                            ON CONFLICT (event_id) DO NOTHING;
                            v_ins := FOUND;
                        END IF;
                        IF v_ins THEN
                            -- The new event is the head when the flow had none:
                            -- eligible now (the wake-up of a drained flow).
                            UPDATE flow f SET seq = new_seq,
                                runnable = CASE WHEN f.head_seq = new_seq THEN true ELSE f.runnable END,
                                wait_until = CASE WHEN f.head_seq = new_seq THEN NULL ELSE f.wait_until END,
                                tick = greatest(f.tick, v_at)
                            WHERE f.flow_id = p_flows[1]
                            RETURNING f.head_seq = new_seq INTO woke;
                            IF woke THEN
                                PERFORM pg_notify(CASE WHEN octet_length(current_schema()) <= 53 THEN 'fairrelay_' || current_schema()
                                                       ELSE 'fairrelay_' || md5(current_schema()) END, '');
                            END IF;
                            status := 'created'; seq := new_seq; tick := v_at; "limit" := NULL;
                            RETURN NEXT;
                            RETURN;
                        END IF;
                        -- Stored meanwhile by another transaction: the tick goes
                        -- on this event's own flow, which the call holds
                        -- (locking the other flow now would take a lock out of
                        -- order).
                        SELECT e.flow_id, e.seq, e.body = p_bodies[1] AS same INTO ex FROM event e WHERE e.event_id = p_ids[1];
                        UPDATE flow f SET tick = v_at WHERE f.flow_id = p_flows[1] AND f.tick < v_at;
                        IF ex.flow_id = p_flows[1] AND ex.same THEN
                            status := 'existing'; seq := ex.seq;
                        ELSE
                            status := 'conflict'; seq := NULL;
                        END IF;
                        tick := v_at; "limit" := NULL;
                        RETURN NEXT;
                        RETURN;
                    END IF;
                END IF;
            END IF;
            -- Anything else (a member flow, a pruned id, an id stored
            -- meanwhile): event by event below, which answers it.
        END IF;
        SELECT array_agg(e.status ORDER BY e.i), array_agg(e.seq ORDER BY e.i), array_agg(e."limit" ORDER BY e.i)
        INTO r_status, r_seq, r_limit
        FROM enqueue_events(p_ids, p_flows, p_bodies, p_groups, v_at, v_new_served, lim.max_backlog, lim.max_flow_backlog)
             WITH ORDINALITY AS e (status, seq, "limit", i);
        EXIT;
    EXCEPTION WHEN unique_violation OR deadlock_detected THEN
        -- Another transaction got there first: start over, after a pause
        -- (migration 014: at least attempt × 5 ms, plus up to 20 ms doubling
        -- with each attempt, at random). The rollback released what
        -- the other was waiting for; starting over at once, this call
        -- could take the same rows again before the other woke to take
        -- them, and meet it in the same deadlock every time (seen: ten
        -- in a row).
        IF attempt = 10 THEN
            RAISE;
        END IF;
        PERFORM pg_sleep(0.005 * attempt + random() * least(0.01 * 2 ^ attempt, 0.5));
    END;
    END LOOP;
    RETURN QUERY SELECT a.status, a.seq, v_at, a.lim FROM unnest(r_status, r_seq, r_limit) AS a (status, seq, lim);
END
$$;

ALTER FUNCTION enqueue_many(TEXT[], TEXT[], BYTEA[], BIGINT, BOOLEAN, BIGINT, INTEGER, TEXT[]) SET enable_seqscan = off;
ALTER FUNCTION enqueue_many(TEXT[], TEXT[], BYTEA[], BIGINT, BOOLEAN, BIGINT, INTEGER, TEXT[]) SET jit = off;
