-- 026: enqueue_many's refusal of a bad field names the event it is in.
--
-- A call of many events (an import, a batch from another language) that
-- held one bad event failed with FR002, the field in DETAIL and the
-- problem in MESSAGE, but not which of the call's events it was: the
-- caller could not tell which one to drop. In a call of more than one
-- event the MESSAGE now leads with "event <i> of <n>: ", i the event's
-- 1-based position in the arrays (as the Go library's Error.Item and the
-- SQLite store's message); DETAIL still names the field alone, and a call
-- of one event answers as before.
--
-- Restated from the function's own definition with an anchor that must
-- occur exactly once (checked); run again, nothing changes.
DO $mig$
DECLARE
    def TEXT;
    raise_old CONSTANT TEXT := $a$RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = bad.field, MESSAGE = bad.problem;$a$;
    raise_new CONSTANT TEXT := $a$-- Migration 026: the event's position in a call of many.
            RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = bad.field,
                MESSAGE = CASE WHEN n > 1 THEN format('event %s of %s: %s', bad.i, n, bad.problem) ELSE bad.problem END;$a$;
BEGIN
    SELECT pg_get_functiondef(p.oid) INTO def
    FROM pg_proc p
    WHERE p.oid = 'enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])'::regprocedure;
    IF position('Migration 026:' IN def) = 0 THEN
        IF (length(def) - length(replace(def, raise_old, ''))) / length(raise_old) <> 1 THEN
            RAISE EXCEPTION 'migration 026: enqueue_many''s definition does not hold its anchor exactly once';
        END IF;
        def := replace(def, raise_old, raise_new);
        EXECUTE def;
    END IF;
END
$mig$;
