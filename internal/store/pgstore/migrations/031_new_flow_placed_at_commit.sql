-- 031: under the fair entry rule a new flow, or a new group, takes its
-- place in the rotation when its transaction commits: its ticket and its
-- creation order.
--
-- SPEC §7: a flow seen for the first time gets served = the ticket, so it
-- joins at the back of the current rotation (ties on served go by creation
-- order), and a flow waiting for its turn is claimed after at most the
-- flows ahead of it; new flows cannot push it back. enqueue_many read the
-- ticket, and drew the creation order (ord, from the sequence flow_ord),
-- when its statement ran. An outbox transaction that made a flow and stayed
-- open while the relay claimed committed it with the ticket of its start,
-- ahead of every flow those claims had rotated past: flows A, B and C, a
-- transaction making N held open over four claims, gave A1 B1 C1 A2 N1 B2
-- ..., B pushed back by a new flow; and a flow made and committed meanwhile,
-- with no claim between the two commits, tied with N on the ticket and came
-- after it (two breakers' reports). Only PostgreSQL: a SQLite outbox
-- transaction holds the writer, so no claim runs while it is open.
--
-- Under the fair rule a new flow's and a new group's served is now -1, a
-- mark no committed row carries, and its ord its rank among the rows its
-- transaction made (1, 2, ... in creation order: take_rank). A constraint
-- trigger deferred to the commit sets served to the ticket then, and ord to
-- B * 2^24 + rank, B one draw of flow_ord per transaction (placed_ord):
-- after every ord of a transaction placed before, in the transaction's own
-- order, whatever order the trigger fires in (a batch writes its new flows
-- in flow id order, for its locks). Drawing each row's ord at commit
-- reordered a batch; placing a transaction's rows at once needed a scan of
-- an index that every new flow leaves a dead entry in. Both counters are
-- session settings tagged with the transaction id: a SET LOCAL made inside
-- the enqueue functions would be undone when they return (they carry SET
-- clauses); a subtransaction that rolls back undoes its ranks with its
-- rows. Only the transaction that made a row ever reads its mark and rank
-- (claims and snapshots see committed rows).
--
-- Nothing is shared by the enqueues (SPEC §10): the trigger writes the rows
-- its transaction made and locks already, reads the claim lane's ticket
-- without a lock, and draws one number of a sequence. What is left is the
-- commit itself: a claim that commits between the trigger and the commit is
-- not seen. The trigger reads the latest committed ticket under READ
-- COMMITTED (the default); a caller's REPEATABLE READ or SERIALIZABLE
-- transaction reads the one of its snapshot (docs/outbox.md). A caller that
-- runs SET CONSTRAINTS ALL IMMEDIATE fires it at the end of each statement
-- instead. Ords of rows placed before this migration are the sequence's own
-- values, below every B * 2^24; a transaction's 2^24th new row and later
-- share one rank (ties then go by name). Under the seed rule (served 0,
-- ties by name) nothing fires and ord is drawn as before. Run again,
-- nothing changes (a constraint trigger has no CREATE OR REPLACE: dropped
-- and made).
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
    'fairrelay internal: the next rank of a row the transaction makes under the fair entry rule, its ord until the commit places it (SPEC §7; migration 031).';

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
    'fairrelay internal: the ord a row of rank p_rank takes at its transaction''s commit, one draw of flow_ord per transaction (SPEC §7; migration 031).';

CREATE OR REPLACE FUNCTION flow_take_place() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE flow f SET served = (SELECT c.ticket FROM clock c WHERE c.id = 1), ord = placed_ord(f.ord)
    WHERE f.flow_id = NEW.flow_id AND f.served < 0;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION flow_take_place() IS
    'fairrelay internal: the trigger flow_takes_its_place''s; at commit, gives a flow made under the fair entry rule the ticket as its served and its creation order then (SPEC §7; migration 031).';
DROP TRIGGER IF EXISTS flow_takes_its_place ON flow;
CREATE CONSTRAINT TRIGGER flow_takes_its_place AFTER INSERT ON flow
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.served < 0)
    EXECUTE FUNCTION flow_take_place();

CREATE OR REPLACE FUNCTION grp_take_place() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE grp g SET served = (SELECT c.ticket FROM clock c WHERE c.id = 1), ord = placed_ord(g.ord)
    WHERE g.group_id = NEW.group_id AND g.served < 0;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION grp_take_place() IS
    'fairrelay internal: the trigger grp_takes_its_place''s; at commit, gives a group placed under the fair entry rule the ticket as its served and its creation order then (SPEC §7, §8; migration 031).';
-- A group is placed when its row is made, or when its first flow comes
-- after a configure made the row (ord 0, no place yet): an update.
DROP TRIGGER IF EXISTS grp_takes_its_place ON grp;
CREATE CONSTRAINT TRIGGER grp_takes_its_place AFTER INSERT OR UPDATE ON grp
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.served < 0)
    EXECUTE FUNCTION grp_take_place();

-- The enqueue functions: enqueue_many gives new flows and groups the mark
-- instead of the ticket it read, and both draw a rank instead of a number
-- of flow_ord for an unplaced row (v_new_served < 0). Restated from their
-- own definitions; enqueue_many holds the ticket's line once and each
-- holds the draw three times (checked); run again, nothing changes.
DO $mig$
DECLARE
    f_name  TEXT;
    def     TEXT;
    served  CONSTANT TEXT := $a$    v_new_served := CASE WHEN v_entry = 'fair' THEN v_ticket ELSE 0 END;
$a$;
    marked  CONSTANT TEXT := $a$    -- Migration 031: under the fair rule, the mark the commit's trigger
    -- replaces with the ticket then (flow_take_place, grp_take_place).
    v_new_served := CASE WHEN v_entry = 'fair' THEN -1 ELSE 0 END;
$a$;
    draw    CONSTANT TEXT := $a$nextval('flow_ord')$a$;
    ranked  CONSTANT TEXT := $a$/* Migration 031 */ CASE WHEN v_new_served < 0 THEN take_rank() ELSE nextval('flow_ord') END$a$;
BEGIN
    FOREACH f_name IN ARRAY ARRAY['enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)',
                                  'enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])'] LOOP
        SELECT pg_get_functiondef(p.oid) INTO def FROM pg_proc p WHERE p.oid = f_name::regprocedure;
        CONTINUE WHEN position('Migration 031' IN def) > 0;
        IF (length(def) - length(replace(def, draw, ''))) / length(draw) <> 3 THEN
            RAISE EXCEPTION 'migration 031: %''s definition does not draw flow_ord exactly three times', f_name;
        END IF;
        def := replace(def, draw, ranked);
        IF f_name LIKE 'enqueue_many%' THEN
            IF (length(def) - length(replace(def, served, ''))) / length(served) <> 1 THEN
                RAISE EXCEPTION 'migration 031: enqueue_many''s definition does not hold its anchor exactly once';
            END IF;
            def := replace(def, served, marked);
        END IF;
        EXECUTE def;
    END LOOP;
END
$mig$;
