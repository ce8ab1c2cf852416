-- 035: the enqueue's refusals quote names as the SQLite store does.
--
-- enqueue_events quoted a flow's and a group's name with quote_literal, 'A',
-- where the SQLite store's same refusal says "A" (Go's %q), so one mistake
-- read differently on the two backends (breakers' reports, twice). go_quote
-- quotes as %q does for the names a store takes (printable, no control
-- character): in double quotes, with \ and " escaped.

CREATE OR REPLACE FUNCTION go_quote(v TEXT) RETURNS TEXT
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path FROM CURRENT
    AS $f$ SELECT '"' || replace(replace(v, '\', '\\'), '"', '\"') || '"' $f$;

COMMENT ON FUNCTION go_quote(TEXT) IS 'fairrelay internal: a name quoted for a refusal''s message as the SQLite store quotes it (migration 035)';

DO $mig$
DECLARE
    def  TEXT;
    fn   CONSTANT TEXT := 'enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)';
    n    INTEGER;
    anchor CONSTANT TEXT := 'quote_literal(';
BEGIN
    SELECT pg_get_functiondef(f.oid) INTO def FROM pg_proc f WHERE f.oid = fn::regprocedure;
    IF position('Migration 035' IN def) > 0 THEN
        RETURN;
    END IF;
    n := (length(def) - length(replace(def, anchor, ''))) / length(anchor);
    IF n <> 3 THEN
        RAISE EXCEPTION 'migration 035: % quotes % names with quote_literal, want 3', fn, n;
    END IF;
    def := replace(def, anchor, 'go_quote(');
    -- The marker, in the body: after its first line of declarations.
    def := regexp_replace(def, '\nDECLARE\n', E'\nDECLARE\n    -- Migration 035: names quoted with go_quote.\n');
    EXECUTE def;
END
$mig$;
