-- 005: the outbox without a shared lock (SPEC §10), the stored entry rule
-- (SPEC §7), and plain SQL for reading an event.
--
-- An enqueue no longer takes the enqueue lane (clock row 2 and its advisory
-- lock): it locks only the rows of its own flows. So
--   * a flow's creation order comes from a sequence, which serialises no
--     transaction (gaps are fine: only the order counts);
--   * the tick of an enqueue is recorded on the row of the flow it locks
--     anyway (flow.tick: its own flow, or the flow of the id it answers
--     existing or conflict for); the store's tick is the largest tick of
--     the clock rows and of the flows (flow_tick makes that an index read);
--   * the whole enqueue is the function enqueue_many below, callable from
--     any language inside the caller's transaction (enqueue is its
--     one-event form);
--   * an enqueue that makes a flow's head claimable notifies the store's
--     channel (pgstore.Channel), delivered at commit: a listening relay
--     claims it at once instead of at its next poll.
-- Clock row 2 stays, as the tick it last recorded; nothing writes it now.

CREATE TABLE settings (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    entry TEXT CHECK (entry IN ('seed', 'fair'))
);
INSERT INTO settings (id, entry) VALUES (1, NULL);

CREATE SEQUENCE flow_ord;
SELECT setval('flow_ord', greatest((SELECT coalesce(max(ord), 0) FROM flow), (SELECT flows FROM clock WHERE id = 2), 1));

ALTER TABLE flow ADD COLUMN tick BIGINT NOT NULL DEFAULT 0;
CREATE INDEX flow_tick ON flow (tick);

-- The due index in (wait_until, flow_id) order: a claim pages through the
-- due flows by that key.
DROP INDEX flow_waiting;
CREATE INDEX flow_waiting ON flow (wait_until, flow_id) WHERE wait_until IS NOT NULL;

-- An event as it stands (migration 004): the mutable columns of the event
-- a flow's head state describes live on the flow row, and win over the
-- event row's own.
CREATE VIEW event_now AS
SELECT e.event_id, e.flow_id, e.seq, e.body,
       CASE WHEN f.head_state_seq = e.seq THEN f.head_state ELSE e.own_state END AS state,
       CASE WHEN f.head_state_seq = e.seq THEN f.head_generation ELSE e.generation END AS generation,
       CASE WHEN f.head_state_seq = e.seq THEN f.head_attempts ELSE e.attempts END AS attempts,
       CASE WHEN f.head_state_seq = e.seq THEN f.head_lifetime_attempts ELSE e.lifetime_attempts END AS lifetime_attempts,
       CASE WHEN f.head_state_seq = e.seq THEN f.head_reason ELSE e.reason END AS reason,
       CASE WHEN f.head_state_seq = e.seq THEN f.head_next_at ELSE e.next_at END AS next_at,
       CASE WHEN f.head_state_seq = e.seq THEN f.head_lease_until ELSE e.lease_until END AS lease_until,
       e.enqueued_at
FROM event e JOIN flow f ON f.flow_id = e.flow_id;

-- The store's clock (SPEC §2): the largest tick any write recorded (the
-- lane rows, and the flows enqueues wrote), and the claim lane's ticket. A
-- view, so that the planner inlines it into every query that reads it.
CREATE VIEW stored_clock AS
SELECT greatest((SELECT max(tick) FROM clock), (SELECT coalesce(max(tick), 0) FROM flow)) AS tick,
       (SELECT ticket FROM clock WHERE id = 1) AS ticket;

-- Why v is not an identifier (event id, flow id, group name), or NULL: the
-- rule of internal/ident, in SQL. 1 to 200 bytes; no Unicode control (Cc),
-- format (Cf) or line/paragraph separator (Zl, Zp) character anywhere; no
-- white space (White_Space) at either end. (PostgreSQL text never holds NUL
-- or invalid UTF-8.) The character classes are generated from Go's
-- unicode tables; a test holds the two rules to the same answers.
CREATE FUNCTION ident_problem(v TEXT) RETURNS TEXT
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN v IS NULL OR v = '' THEN 'empty'
        WHEN octet_length(v) > 200 THEN octet_length(v) || ' bytes, more than the limit of 200'
        WHEN v ~ '[\u0001-\u001F\u007F-\u009F\u00AD\u0600-\u0605\u061C\u06DD\u070F\u0890-\u0891\u08E2\u180E\u200B-\u200F\u2028-\u202E\u2060-\u2064\u2066-\u206F\uFEFF\uFFF9-\uFFFB\U000110BD\U000110CD\U00013430-\U0001343F\U0001BCA0-\U0001BCA3\U0001D173-\U0001D17A\U000E0001\U000E0020-\U000E007F]'
            THEN 'a control, format or separator character'
        WHEN v ~ '^[\u0009-\u000D\u0020\u0085\u00A0\u1680\u2000-\u200A\u2028-\u2029\u202F\u205F\u3000]'
          OR v ~ '[\u0009-\u000D\u0020\u0085\u00A0\u1680\u2000-\u200A\u2028-\u2029\u202F\u205F\u3000]$'
            THEN 'white space at the start or the end (transports trim it)'
    END
$$;

-- SPEC §2 enqueue of a batch, in the caller's transaction (SPEC §10): one
-- answer per event, in order: status created (with the new seq), existing
-- (with the stored seq) or conflict, and the tick the write ran at.
--   at: the tick of the write; NULL (the default) is the store's tick.
--   floor: a tick below the store's runs at the store's tick instead of
--     failing.
--   max_tick_jump: when positive, an at further ahead of the store's tick
--     is refused (not with floor: a daemon clock's tick, SPEC §7).
--   max_body_bytes: the largest body accepted.
-- Errors (SQLSTATE): FR001 clock_regressed; FR002 invalid_input, the field
-- in DETAIL (at, id, flow, body). Checked in SPEC §2's order: the clock,
-- then the fields, then the answers. Nothing changes on an error.
--
-- Locks: the rows of the flows it appends to, and of the flows of the ids
-- it answers existing or conflict for (their tick is recorded there), all
-- first and in flow_id order, held to the end of the caller's transaction:
-- a second transaction that enqueues to one of those flows waits for it
-- (seq order is commit order, and a rollback leaves no hole); every other
-- flow goes on. No row shared by all enqueues is read for update or
-- written. Two calls in one transaction each do this on their own, so a
-- transaction that calls it for flows out of flow_id order can deadlock
-- with another; within one call, nothing does: a batch that meets another
-- transaction's new flows or ids — waiting for them, or in a deadlock
-- PostgreSQL breaks after deadlock_timeout (1 s by default), which two
-- batches creating the same new flows or ids in different orders can make
-- — starts over in a subtransaction and sees them committed.
--
-- Notifies: when one of its events is a claimable head — a new flow's
-- first, or an event onto a flow that had no head — it calls pg_notify
-- once, on 'fairrelay_' || current_schema() (the md5 of the schema name
-- past 53 bytes: a channel holds 63), with an empty payload, which
-- PostgreSQL delivers at commit and once per transaction however many
-- calls sent it. Only then: a notifying transaction holds a server-wide
-- lock from its commit's start to its end (notifications keep commit
-- order), so notifying commits are flushed one at a time; an event behind
-- a head needs no wake-up (the relay that settles the head claims it).
CREATE FUNCTION enqueue_many(p_ids TEXT[], p_flows TEXT[], p_bodies BYTEA[], p_at BIGINT DEFAULT NULL,
                             p_floor BOOLEAN DEFAULT false, p_max_tick_jump BIGINT DEFAULT 0,
                             p_max_body_bytes INTEGER DEFAULT 1048576)
RETURNS TABLE (status TEXT, seq BIGINT, tick BIGINT)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    n        INTEGER := coalesce(cardinality(p_ids), 0);
    stored   BIGINT := (SELECT c.tick FROM stored_clock c);
    v_at     BIGINT := p_at;
    v_entry  TEXT;
    v_ticket BIGINT;
    bad      RECORD;
    r_status TEXT[];
    r_seq    BIGINT[];
    all_created BOOLEAN;
    fr       RECORD;
    ex       RECORD;
    new_seq  BIGINT;
    woke     BOOLEAN := false; -- an event of the call is a claimable head
    woke_one BOOLEAN;
BEGIN
    IF coalesce(cardinality(p_flows), 0) <> n OR coalesce(cardinality(p_bodies), 0) <> n THEN
        RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = 'ids',
            MESSAGE = format('ids, flows and bodies differ in length (%s, %s, %s)', n, coalesce(cardinality(p_flows), 0), coalesce(cardinality(p_bodies), 0));
    END IF;
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
    -- Ids and flows of printable ASCII with no space at either end (the
    -- common case) pass ident_problem's rule by construction; only a batch
    -- with another one, or with a body out of bounds, is checked in detail
    -- (a call of ident_problem per value costs ~10 µs: it is not inlined).
    IF EXISTS (SELECT 1 FROM unnest(p_ids || p_flows) AS v (s)
               WHERE v.s IS NULL OR octet_length(v.s) > 200 OR v.s !~ '^[!-~]([ -~]*[!-~])?$')
       OR EXISTS (SELECT 1 FROM unnest(p_bodies) AS b (body)
                  WHERE b.body IS NULL OR octet_length(b.body) = 0 OR octet_length(b.body) > p_max_body_bytes) THEN
        SELECT u.i AS i,
               CASE WHEN ident_problem(u.id) IS NOT NULL THEN 'id'
                    WHEN ident_problem(u.flow) IS NOT NULL THEN 'flow'
                    ELSE 'body' END AS field,
               coalesce(ident_problem(u.id), ident_problem(u.flow),
                        CASE WHEN u.body IS NULL OR octet_length(u.body) = 0 THEN 'empty'
                             ELSE format('%s bytes, more than the limit of %s', octet_length(u.body), p_max_body_bytes) END) AS problem
        INTO bad
        FROM unnest(p_ids, p_flows, p_bodies) WITH ORDINALITY AS u (id, flow, body, i)
        WHERE ident_problem(u.id) IS NOT NULL OR ident_problem(u.flow) IS NOT NULL
           OR u.body IS NULL OR octet_length(u.body) = 0 OR octet_length(u.body) > p_max_body_bytes
        ORDER BY u.i LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = bad.field, MESSAGE = bad.problem;
        END IF;
    END IF;
    SELECT s.entry INTO v_entry FROM settings s WHERE s.id = 1;
    SELECT c.ticket INTO v_ticket FROM clock c WHERE c.id = 1;
    IF n > 1 THEN
        -- A batch, set by set, in one statement: the new events numbered
        -- per flow in batch order (inserted in id order); the flows they
        -- create inserted with their final values (in flow_id order), in
        -- the creation order of their first events (SPEC §7; under the
        -- fair rule a new flow joins at the back of the rotation), the others
        -- advanced (and woken when they had no head); the flows of known
        -- ids given the tick. An id or a flow another transaction created
        -- meanwhile (it has committed by the time this one learns of it),
        -- or a deadlock with it, rolls the block back, locks and all, and
        -- the batch starts over, seeing it. The answers stay in arrays
        -- until the statement has completed.
        FOR attempt IN 1 .. 10 LOOP
        BEGIN
            -- The flows of the batch and of its known ids that exist,
            -- locked first, in flow_id order.
            PERFORM 1 FROM flow f
            WHERE f.flow_id = ANY (p_flows || ARRAY(SELECT e.flow_id FROM event e WHERE e.event_id = ANY (p_ids)))
            ORDER BY f.flow_id FOR NO KEY UPDATE;
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
                SELECT nf.flow, nf.ord, nf.last, CASE WHEN v_entry = 'fair' THEN v_ticket ELSE 0 END, 1, true, NULL, v_at
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
                    runnable = CASE WHEN f.head_seq = pf.first THEN true ELSE f.runnable END,
                    wait_until = CASE WHEN f.head_seq = pf.first THEN NULL ELSE f.wait_until END,
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
            -- Another transaction got there first: start over.
            r_status := NULL;
            woke := false;
            IF attempt = 10 THEN
                RAISE;
            END IF;
        END;
        END LOOP;
        IF woke THEN
            PERFORM pg_notify(CASE WHEN octet_length(current_schema()) <= 53 THEN 'fairrelay_' || current_schema()
                                   ELSE 'fairrelay_' || md5(current_schema()) END, '');
        END IF;
        RETURN QUERY SELECT a.status, a.seq, v_at FROM unnest(r_status, r_seq) AS a (status, seq);
        RETURN;
    END IF;
    -- One event: its flow, and the flow of its id if it is known, locked
    -- first, in flow_id order.
    PERFORM 1 FROM flow f
    WHERE f.flow_id = p_flows[1] OR f.flow_id = (SELECT e.flow_id FROM event e WHERE e.event_id = p_ids[1])
    ORDER BY f.flow_id FOR NO KEY UPDATE;
    FOR i IN 1 .. n LOOP
        SELECT e.flow_id, e.seq, e.body INTO ex FROM event e WHERE e.event_id = p_ids[i];
        IF NOT FOUND THEN
            SELECT f.seq INTO fr FROM flow f WHERE f.flow_id = p_flows[i] FOR NO KEY UPDATE;
            IF NOT FOUND THEN
                -- A new flow (at the back of the rotation under the fair
                -- rule); one created meanwhile by another transaction is
                -- waited for and read.
                INSERT INTO flow (flow_id, ord, seq, served, head_seq, runnable, wait_until, tick)
                VALUES (p_flows[i], nextval('flow_ord'), 0, CASE WHEN v_entry = 'fair' THEN v_ticket ELSE 0 END, 1, false, NULL, v_at)
                ON CONFLICT (flow_id) DO NOTHING;
                SELECT f.seq INTO fr FROM flow f WHERE f.flow_id = p_flows[i] FOR NO KEY UPDATE;
            END IF;
            new_seq := fr.seq + 1;
            -- A transaction that inserted the same id first wins; this one
            -- then answers existing or conflict, and the flow is left as
            -- it was (no hole).
            INSERT INTO event (event_id, flow_id, seq, body, own_state, generation, attempts, lifetime_attempts,
                               reason, next_at, lease_until, enqueued_at)
            VALUES (p_ids[i], p_flows[i], new_seq, p_bodies[i], 'ready', 0, 0, 0, NULL, v_at, 0, v_at)
            ON CONFLICT (event_id) DO NOTHING;
            IF FOUND THEN
                -- The new event is the head when the flow had none: eligible
                -- now (the wake-up of a drained flow).
                UPDATE flow f SET seq = new_seq,
                    runnable = CASE WHEN f.head_seq = new_seq THEN true ELSE f.runnable END,
                    wait_until = CASE WHEN f.head_seq = new_seq THEN NULL ELSE f.wait_until END,
                    tick = greatest(f.tick, v_at)
                WHERE f.flow_id = p_flows[i]
                RETURNING f.head_seq = new_seq INTO woke_one;
                woke := woke OR woke_one;
                status := 'created'; seq := new_seq; tick := v_at;
                RETURN NEXT;
                CONTINUE;
            END IF;
            SELECT e.flow_id, e.seq, e.body INTO ex FROM event e WHERE e.event_id = p_ids[i];
        END IF;
        -- A known id: nothing changes but the tick, recorded on its flow.
        UPDATE flow f SET tick = v_at WHERE f.flow_id = ex.flow_id AND f.tick < v_at;
        IF ex.flow_id = p_flows[i] AND ex.body = p_bodies[i] THEN
            status := 'existing'; seq := ex.seq;
        ELSE
            status := 'conflict'; seq := NULL;
        END IF;
        tick := v_at;
        RETURN NEXT;
    END LOOP;
    IF woke THEN
        PERFORM pg_notify(CASE WHEN octet_length(current_schema()) <= 53 THEN 'fairrelay_' || current_schema()
                               ELSE 'fairrelay_' || md5(current_schema()) END, '');
    END IF;
END
$$;

-- enqueue_many for one event, for SQL callers:
--   SELECT * FROM enqueue('A1', 'A', '{"delta":1}'::bytea);
-- at NULL (the default) is the store's tick.
CREATE FUNCTION enqueue(id TEXT, flow TEXT, body BYTEA, at BIGINT DEFAULT NULL)
RETURNS TABLE (status TEXT, seq BIGINT, tick BIGINT)
LANGUAGE sql SET search_path FROM CURRENT AS $$
    SELECT * FROM enqueue_many(ARRAY[$1], ARRAY[$2], ARRAY[$3], $4)
$$;
