-- 025: the schema's functions never read a caller's temporary tables, from
-- a breaker's report (SPEC §2: created means the event is stored; §10: the
-- outbox runs in the caller's transaction, whatever that session holds).
--
-- The functions ran with SET search_path FROM CURRENT, the store's schema,
-- and PostgreSQL searches a session's temporary schema before any schema
-- the search_path names unless the path names pg_temp itself. A caller's
-- session holding a TEMP table named like a store table (event, flow,
-- name_claim, ...) took the function's writes: enqueue_many answered
-- created, the flow's seq moved in the store, and the event went to the
-- session's temporary table and was gone at its end, leaving the store
-- with a head that does not exist. Every function of the schema now sets
-- its search_path to the schema and then pg_temp, last; the migrations
-- after this one run with that search_path (MigrationLock sets it), so a
-- function they make with FROM CURRENT takes it too.
DO $mig$
DECLARE
    f REGPROCEDURE;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.pronamespace = (SELECT n.oid FROM pg_namespace n WHERE n.nspname = current_schema()) AND p.prokind = 'f'
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
    END LOOP;
END
$mig$;
