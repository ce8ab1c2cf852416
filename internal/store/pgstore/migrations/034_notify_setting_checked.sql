-- 034: a value of fairrelay.notify that is neither on nor off is refused.
--
-- Migration 033 left the relay's notification out when the transaction set
-- fairrelay.notify to off, false, no or 0, and sent it for any other value: a
-- misspelt one (SET LOCAL fairrelay.notify = 'of') notified silently, and a
-- two-phase-commit transaction then failed at PREPARE with PostgreSQL's "cannot
-- PREPARE a transaction that has executed LISTEN, UNLISTEN, or NOTIFY", which
-- names no setting (a fresh user's report). enqueue_many now refuses the call
-- (FR002, invalid input naming fairrelay.notify) unless the setting is unset,
-- empty, or one of on, true, yes, 1, off, false, no, 0 in any case, whether or
-- not the call would notify: a typo shows at the first enqueue.

DO $mig$
DECLARE
    def  TEXT;
    fn   CONSTANT TEXT := 'enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])';
    n    INTEGER;
    anchor CONSTANT TEXT := $a$    -- Migration 024: the arguments themselves, each named when wrong.$a$;
    patch  CONSTANT TEXT := $a$    -- Migration 034: fairrelay.notify (migration 033) is on or off.
    IF lower(coalesce(current_setting('fairrelay.notify', true), '')) NOT IN ('', 'on', 'true', 'yes', '1', 'off', 'false', 'no', '0') THEN
        RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = 'fairrelay.notify',
            MESSAGE = format('fairrelay.notify %L: want off (or false, no, 0) to leave the relay''s notification out, or on (or true, yes, 1, or unset) to send it',
                             current_setting('fairrelay.notify', true));
    END IF;
    -- Migration 024: the arguments themselves, each named when wrong.$a$;
BEGIN
    SELECT pg_get_functiondef(f.oid) INTO def FROM pg_proc f WHERE f.oid = fn::regprocedure;
    IF position('Migration 034' IN def) > 0 THEN
        RETURN;
    END IF;
    n := (length(def) - length(replace(def, anchor, ''))) / length(anchor);
    IF n <> 1 THEN
        RAISE EXCEPTION 'migration 034: % holds its argument checks'' heading % times, want 1', fn, n;
    END IF;
    EXECUTE replace(def, anchor, patch);
END
$mig$;
