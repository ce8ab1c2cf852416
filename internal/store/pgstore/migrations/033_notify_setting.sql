-- 033: an enqueue notifies the relay unless the transaction says fairrelay.notify = off.
--
-- An enqueue that makes a flow's head claimable calls pg_notify (migration 013), and
-- PostgreSQL refuses to PREPARE a transaction that notified ("cannot PREPARE a
-- transaction that has executed LISTEN, UNLISTEN, or NOTIFY"): a two-phase-commit
-- transaction (XA, JTA) could enqueue onto a flow with a head but failed at PREPARE
-- when its enqueue made one (a breaker's report; SPEC §10: usable inside any
-- transaction). SET LOCAL fairrelay.notify = off before the enqueue leaves the
-- notification out (off, false, no or 0, in any case); the relay then finds the
-- event at its next poll. Unset, empty or any other value notifies, as before.

DO $mig$
DECLARE
    def  TEXT;
    fn   TEXT;
    want INTEGER;
    n    INTEGER;
    anchor CONSTANT TEXT := $a$ELSE 'fairrelay_' || md5(current_schema()) END, '');$a$;
    patch  CONSTANT TEXT := $a$ELSE 'fairrelay_' || md5(current_schema()) END, '')
        /* Migration 033 */ WHERE lower(coalesce(current_setting('fairrelay.notify', true), '')) NOT IN ('off', 'false', 'no', '0');$a$;
BEGIN
    FOR fn, want IN SELECT v.fn, v.want FROM (VALUES
        ('enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])', 3),
        ('enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)', 1)
    ) AS v (fn, want) LOOP
        SELECT pg_get_functiondef(f.oid) INTO def FROM pg_proc f WHERE f.oid = fn::regprocedure;
        IF position('Migration 033' IN def) > 0 THEN
            CONTINUE;
        END IF;
        n := (length(def) - length(replace(def, anchor, ''))) / length(anchor);
        IF n <> want THEN
            RAISE EXCEPTION 'migration 033: % holds its notification % times, want %', fn, n, want;
        END IF;
        EXECUTE replace(def, anchor, patch);
    END LOOP;
END
$mig$;
