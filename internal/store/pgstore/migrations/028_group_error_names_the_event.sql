-- 028: a flow's group refused in a call of many events names the event.
--
-- Migration 026 made enqueue_many's refusal of a bad field lead with
-- "event <i> of <n>: " in a call of more than one event; the one refusal
-- made further in, in enqueue_events (an event naming another group for a
-- flow that exists: SPEC §8), still said only which flow, so a caller of a
-- 500-event batch could not tell which event to fix (a breaker's report).
-- It now leads the same way; DETAIL still names the field alone, and a
-- call of one event answers as before.
--
-- Restated from the function's own definition with an anchor that must
-- occur exactly once (checked); run again, nothing changes.
DO $mig$
DECLARE
    def TEXT;
    anchor CONSTANT TEXT := $a$MESSAGE = format('flow %s belongs to group %s;$a$;
    patched CONSTANT TEXT := $a$MESSAGE = /* Migration 028: the event's position in a call of many. */
                    CASE WHEN n > 1 THEN format('event %s of %s: ', i, n) ELSE '' END ||
                    format('flow %s belongs to group %s;$a$;
BEGIN
    SELECT pg_get_functiondef(p.oid) INTO def
    FROM pg_proc p
    WHERE p.oid = 'enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)'::regprocedure;
    IF position('Migration 028:' IN def) = 0 THEN
        IF (length(def) - length(replace(def, anchor, ''))) / length(anchor) <> 1 THEN
            RAISE EXCEPTION 'migration 028: enqueue_events''s definition does not hold its anchor exactly once';
        END IF;
        def := replace(def, anchor, patched);
        EXECUTE def;
    END IF;
END
$mig$;
