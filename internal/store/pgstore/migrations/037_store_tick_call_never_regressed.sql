-- 037: a call at the store's tick (at NULL, or p_floor) is never answered
-- clock_regressed.
--
-- Migration 021 made enqueue_events read the stored tick again after taking
-- each new flow's name, and raise FR001 when it had moved past the call's
-- tick, so that a call that waited for another transaction making the flow
-- would not append to it behind that transaction's tick; enqueue_many then
-- starts the whole call over, ten times at most, and after the tenth passed
-- FR001 on: clock_regressed, for a call that gave no tick at all. Beside
-- busy relays the tick moves every millisecond, so a batch of many new
-- flows in a group (which goes event by event) met it ten times (an SRE's
-- drill: a bulk enqueue of 1 000 events onto 100 new flows of a new group
-- beside two busy relays, 8 of 8; the SQL function the same).
--
-- Now a call at NULL (or with p_floor) that meets a moved tick ten times is
-- busy (40001, "try again"), which --retry-for and an application's retry
-- of its transaction take; clock_regressed is left to an explicit at. That
-- such a batch still fails beside busy relays is open: taking every name
-- the call needs before it reads the tick would let it succeed (a first
-- try that read the tick again only after the names it waited for was
-- dropped: a breaker found it let a grouped call append behind another
-- transaction's flow).
--
-- enqueue_many is restated from its own definition with an anchor that must
-- occur once (checked, so that the migration cannot apply to a body it was
-- not written for); run again, it changes nothing.
DO $mig$
DECLARE
    def TEXT;
    fn_many   CONSTANT TEXT := 'enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])';
    a_handler CONSTANT TEXT := E'        IF (p_at IS NOT NULL AND NOT p_floor) OR attempt = 10 THEN\n            RAISE;\n        END IF;\n    WHEN unique_violation OR deadlock_detected THEN';
BEGIN
    SELECT pg_get_functiondef(f.oid) INTO def FROM pg_proc f WHERE f.oid = fn_many::regprocedure;
    IF position('Migration 037' IN def) = 0 THEN
        IF (length(def) - length(replace(def, a_handler, ''))) / length(a_handler) <> 1 THEN
            RAISE EXCEPTION 'migration 037: % does not hold its FR001 handler once', fn_many;
        END IF;
        def := replace(def, a_handler,
            E'        IF p_at IS NOT NULL AND NOT p_floor THEN\n            RAISE;\n' ||
            E'        ELSIF attempt = 10 THEN\n' ||
            E'            -- Migration 037: at the store''s tick, never clock_regressed.\n' ||
            E'            RAISE EXCEPTION USING ERRCODE = ''40001'',\n' ||
            E'                MESSAGE = ''enqueue: the stores tick moved past the calls ten times while it waited for flows or groups other transactions were making; nothing was changed, try again'';\n' ||
            E'        END IF;\n    WHEN unique_violation OR deadlock_detected THEN');
        EXECUTE def;
    END IF;
END
$mig$;
