-- 032: under the fair entry rule a new flow's creation order, which breaks
-- ties on served (SPEC §7), is taken at commit too, with its ticket.
--
-- Migration 031 gave a new flow its ticket at commit but kept the creation
-- order (ord) its enqueue drew from the sequence flow_ord: a flow made and
-- committed while an outbox transaction making another stayed open, with no
-- claim between the two commits, tied with it on the ticket and came after
-- it, pushed back by a flow that joined later (a breaker's report). Drawing
-- each row's ord again at commit does not do: the trigger fires in the
-- order the rows were written, and a batch writes its new flows in flow id
-- order (for its locks), not in the order of their first events, its
-- creation order; placing all of a transaction's rows at once needed a
-- scan of an index that every new flow leaves a dead entry in.
--
-- So under the fair rule an unplaced row's ord is its rank among the rows
-- its transaction made (1, 2, ... in creation order: take_rank), and the
-- commit's trigger draws one number B from flow_ord for the transaction
-- (at its first firing) and sets ord = B * 2^24 + rank: after every ord
-- of a transaction placed before, in the transaction's own order. Both
-- counters are session settings keyed by the transaction id: a SET LOCAL
-- made inside the enqueue functions would be undone when they return (they
-- carry SET clauses); a subtransaction that rolls back undoes its ranks
-- with its rows. Nothing is shared by the enqueues (SPEC §10): one draw of
-- a sequence per committing transaction. Ords of rows placed before this
-- migration are the sequence's own values, below every B * 2^24. Under the
-- seed rule (ties by name) nothing changes. A transaction's 2^24th new row
-- and later share one rank (ties then go by name).
CREATE OR REPLACE FUNCTION take_rank() RETURNS BIGINT LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    v_xact TEXT := pg_current_xact_id()::text;
    v_cur  TEXT := current_setting('fairrelay.rank', true);
    v_n    BIGINT := 1;
BEGIN
    IF v_cur LIKE v_xact || ':%' THEN
        v_n := split_part(v_cur, ':', 2)::bigint + 1;
    END IF;
    PERFORM set_config('fairrelay.rank', v_xact || ':' || v_n, false);
    RETURN least(v_n, 16777215);
END
$$;
COMMENT ON FUNCTION take_rank() IS
    'fairrelay internal: the next rank of a row the transaction makes under the fair entry rule, its ord until the commit places it (SPEC §7; migration 032).';

CREATE OR REPLACE FUNCTION placed_ord(p_rank BIGINT) RETURNS BIGINT LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    v_xact TEXT := pg_current_xact_id()::text;
    v_cur  TEXT := current_setting('fairrelay.place', true);
    v_base BIGINT;
BEGIN
    IF v_cur LIKE v_xact || ':%' THEN
        v_base := split_part(v_cur, ':', 2)::bigint;
    ELSE
        v_base := nextval('flow_ord');
        PERFORM set_config('fairrelay.place', v_xact || ':' || v_base, false);
    END IF;
    RETURN v_base * 16777216 + p_rank;
END
$$;
COMMENT ON FUNCTION placed_ord(BIGINT) IS
    'fairrelay internal: the ord a row of rank p_rank takes at its transaction''s commit, one draw of flow_ord per transaction (SPEC §7; migration 032).';

CREATE OR REPLACE FUNCTION flow_take_place() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE flow f SET served = (SELECT c.ticket FROM clock c WHERE c.id = 1), ord = placed_ord(f.ord)
    WHERE f.flow_id = NEW.flow_id AND f.served < 0;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION flow_take_place() IS
    'fairrelay internal: the trigger flow_takes_its_place''s; at commit, gives a flow made under the fair entry rule the ticket as its served and its creation order then (SPEC §7; migrations 031, 032).';

CREATE OR REPLACE FUNCTION grp_take_place() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE grp g SET served = (SELECT c.ticket FROM clock c WHERE c.id = 1), ord = placed_ord(g.ord)
    WHERE g.group_id = NEW.group_id AND g.served < 0;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION grp_take_place() IS
    'fairrelay internal: the trigger grp_takes_its_place''s; at commit, gives a group placed under the fair entry rule the ticket as its served and its creation order then (SPEC §7, §8; migrations 031, 032).';

-- The enqueue functions draw a rank instead of a number of flow_ord for
-- an unplaced row (v_new_served < 0: the fair rule, migration 031).
-- Restated from their own definitions; each holds the draw exactly three
-- times (checked); run again, nothing changes.
DO $mig$
DECLARE
    f_name TEXT;
    def    TEXT;
    draw    CONSTANT TEXT := $a$nextval('flow_ord')$a$;
    patched CONSTANT TEXT := $a$/* Migration 032 */ CASE WHEN v_new_served < 0 THEN take_rank() ELSE nextval('flow_ord') END$a$;
BEGIN
    FOREACH f_name IN ARRAY ARRAY['enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)',
                                  'enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])'] LOOP
        SELECT pg_get_functiondef(p.oid) INTO def FROM pg_proc p WHERE p.oid = f_name::regprocedure;
        CONTINUE WHEN position('Migration 032' IN def) > 0;
        IF (length(def) - length(replace(def, draw, ''))) / length(draw) <> 3 THEN
            RAISE EXCEPTION 'migration 032: %''s definition does not draw flow_ord exactly three times', f_name;
        END IF;
        EXECUTE replace(def, draw, patched);
    END LOOP;
END
$mig$;
