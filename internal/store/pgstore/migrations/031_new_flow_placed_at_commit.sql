-- 031: under the fair entry rule a new flow, or a new group, takes its
-- place in the rotation when its transaction commits.
--
-- SPEC §7: a flow seen for the first time gets served = the ticket, so it
-- joins at the back of the current rotation, and a flow waiting for its
-- turn is claimed after at most the flows ahead of it; new flows cannot
-- push it back. enqueue_many read the ticket when its statement ran. An
-- outbox transaction that made a flow and stayed open while the relay
-- claimed committed it with the ticket of its start, ahead of every flow
-- those claims had rotated past: flows A, B and C, a transaction making N
-- held open over four claims, gave A1 B1 C1 A2 N1 B2 ..., B pushed back by
-- a new flow (a breaker's report). Only PostgreSQL: a SQLite outbox
-- transaction holds the writer, so no claim runs while it is open.
--
-- A new flow's and a new group's served is now -1 under the fair rule, a
-- mark no committed row carries: a constraint trigger, deferred to the
-- commit, sets it to the ticket then. Only the transaction that made the
-- row ever reads the mark (claims and snapshots see committed rows).
-- Nothing is shared by the enqueues: the trigger writes the rows its
-- transaction made and locks already, and reads the claim lane's ticket
-- without a lock (SPEC §10). What is left is the commit itself: a claim
-- that commits between the trigger and the commit is not seen, as
-- docs/operations.md says of a flow created while a claim commits. The
-- trigger reads the latest committed ticket under READ COMMITTED (the
-- default); a caller's REPEATABLE READ or SERIALIZABLE transaction reads
-- the one of its snapshot (docs/outbox.md). A caller that runs SET
-- CONSTRAINTS ALL IMMEDIATE fires it at the end of each statement instead.
-- The creation order (ord), which breaks ties on served, stays the one the
-- enqueue drew: a flow made and committed meanwhile, tying on the ticket,
-- comes after (docs/outbox.md). Under the seed rule served is 0 and
-- nothing fires. Run again, nothing
-- changes (a constraint trigger has no CREATE OR REPLACE: dropped and made).
CREATE OR REPLACE FUNCTION flow_take_place() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE flow f SET served = (SELECT c.ticket FROM clock c WHERE c.id = 1)
    WHERE f.flow_id = NEW.flow_id AND f.served < 0;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION flow_take_place() IS
    'fairrelay internal: the trigger flow_takes_its_place''s; at commit, gives a flow made under the fair entry rule the ticket as its served (SPEC §7; migration 031).';
DROP TRIGGER IF EXISTS flow_takes_its_place ON flow;
CREATE CONSTRAINT TRIGGER flow_takes_its_place AFTER INSERT ON flow
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.served < 0)
    EXECUTE FUNCTION flow_take_place();

CREATE OR REPLACE FUNCTION grp_take_place() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE grp g SET served = (SELECT c.ticket FROM clock c WHERE c.id = 1)
    WHERE g.group_id = NEW.group_id AND g.served < 0;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION grp_take_place() IS
    'fairrelay internal: the trigger grp_takes_its_place''s; at commit, gives a group placed under the fair entry rule the ticket as its served (SPEC §7, §8; migration 031).';
-- A group is placed when its row is made, or when its first flow comes
-- after a configure made the row (ord 0, no place yet): an update.
DROP TRIGGER IF EXISTS grp_takes_its_place ON grp;
CREATE CONSTRAINT TRIGGER grp_takes_its_place AFTER INSERT OR UPDATE ON grp
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.served < 0)
    EXECUTE FUNCTION grp_take_place();

-- enqueue_many gives its new flows and groups the mark instead of the
-- ticket it read. Restated from its own definition with an anchor that
-- must occur exactly once (checked); run again, nothing changes.
DO $mig$
DECLARE
    def TEXT;
    anchor CONSTANT TEXT := $a$    v_new_served := CASE WHEN v_entry = 'fair' THEN v_ticket ELSE 0 END;
$a$;
    patched CONSTANT TEXT := $a$    -- Migration 031: under the fair rule, the mark the commit's trigger
    -- replaces with the ticket then (flow_take_place, grp_take_place).
    v_new_served := CASE WHEN v_entry = 'fair' THEN -1 ELSE 0 END;
$a$;
BEGIN
    SELECT pg_get_functiondef(p.oid) INTO def
    FROM pg_proc p
    WHERE p.oid = 'enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])'::regprocedure;
    IF position('Migration 031:' IN def) = 0 THEN
        IF (length(def) - length(replace(def, anchor, ''))) / length(anchor) <> 1 THEN
            RAISE EXCEPTION 'migration 031: enqueue_many''s definition does not hold its anchor exactly once';
        END IF;
        def := replace(def, anchor, patched);
        EXECUTE def;
    END IF;
END
$mig$;
