-- 024: enqueue_many checks its own arguments, from a breaker's report (SPEC
-- §10: bad input is an error naming the field, and changes nothing).
--
-- p_max_body_bytes NULL turned the body limit off (a 3 000 000-byte body
-- was stored, which a receiver refuses for good) and a negative one gave
-- "11 bytes, more than the limit of -5" naming body; p_max_tick_jump NULL
-- or negative set no limit where only 0 means that; p_floor NULL was taken
-- as false. Arrays not indexed from 1 (or of more than one dimension)
-- failed with the database's own errors (a NULL in name_claim's column,
-- "cannot concatenate incompatible arrays"), naming no field. And arrays
-- of different lengths named ids, whatever array differed, and counted
-- groups that were not passed. Each is now FR002 naming the argument.
-- Arrays that are all NULL stay an empty batch (array_agg over no rows).
--
-- Restated from its own definition with an anchor that must occur exactly
-- once (checked); run again, nothing changes.
DO $mig$
DECLARE
    def TEXT;
    chk_old CONSTANT TEXT := $a$    IF coalesce(cardinality(p_flows), 0) <> n OR coalesce(cardinality(p_bodies), 0) <> n
       OR (p_groups IS NOT NULL AND cardinality(p_groups) <> n) THEN
        RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = 'ids',
            MESSAGE = format('ids, flows, bodies and groups differ in length (%s, %s, %s, %s)', n, coalesce(cardinality(p_flows), 0),
                             coalesce(cardinality(p_bodies), 0), coalesce(cardinality(p_groups), n));
    END IF;
$a$;
    chk_new CONSTANT TEXT := $a$    -- Migration 024: the arguments themselves, each named when wrong.
    IF p_max_body_bytes IS NULL OR p_max_body_bytes < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = 'p_max_body_bytes',
            MESSAGE = format('p_max_body_bytes %s: want a positive number of bytes', coalesce(p_max_body_bytes::text, 'NULL'));
    END IF;
    IF p_max_tick_jump IS NULL OR p_max_tick_jump < 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = 'p_max_tick_jump',
            MESSAGE = format('p_max_tick_jump %s: want 0 (no limit) or a positive number of ticks', coalesce(p_max_tick_jump::text, 'NULL'));
    END IF;
    IF p_floor IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = 'p_floor', MESSAGE = 'p_floor NULL: want true or false';
    END IF;
    IF cardinality(p_ids) > 0 AND (array_ndims(p_ids) <> 1 OR array_lower(p_ids, 1) <> 1) THEN
        RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = 'ids', MESSAGE = 'ids: want a one-dimensional array indexed from 1';
    ELSIF cardinality(p_flows) > 0 AND (array_ndims(p_flows) <> 1 OR array_lower(p_flows, 1) <> 1) THEN
        RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = 'flows', MESSAGE = 'flows: want a one-dimensional array indexed from 1';
    ELSIF cardinality(p_bodies) > 0 AND (array_ndims(p_bodies) <> 1 OR array_lower(p_bodies, 1) <> 1) THEN
        RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = 'bodies', MESSAGE = 'bodies: want a one-dimensional array indexed from 1';
    ELSIF cardinality(p_groups) > 0 AND (array_ndims(p_groups) <> 1 OR array_lower(p_groups, 1) <> 1) THEN
        RAISE EXCEPTION USING ERRCODE = 'FR002', DETAIL = 'groups', MESSAGE = 'groups: want a one-dimensional array indexed from 1';
    END IF;
    IF coalesce(cardinality(p_flows), 0) <> n OR coalesce(cardinality(p_bodies), 0) <> n
       OR (p_groups IS NOT NULL AND cardinality(p_groups) <> n) THEN
        RAISE EXCEPTION USING ERRCODE = 'FR002',
            DETAIL = CASE WHEN coalesce(cardinality(p_flows), 0) <> n THEN 'flows'
                          WHEN coalesce(cardinality(p_bodies), 0) <> n THEN 'bodies'
                          ELSE 'groups' END,
            MESSAGE = CASE WHEN p_groups IS NULL
                THEN format('ids, flows and bodies differ in length (%s, %s, %s)', n, coalesce(cardinality(p_flows), 0),
                            coalesce(cardinality(p_bodies), 0))
                ELSE format('ids, flows, bodies and groups differ in length (%s, %s, %s, %s)', n, coalesce(cardinality(p_flows), 0),
                            coalesce(cardinality(p_bodies), 0), cardinality(p_groups)) END;
    END IF;
$a$;
BEGIN
    SELECT pg_get_functiondef(p.oid) INTO def
    FROM pg_proc p
    WHERE p.oid = 'enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])'::regprocedure;
    IF position('Migration 024:' IN def) = 0 THEN
        IF (length(def) - length(replace(def, chk_old, ''))) / length(chk_old) <> 1 THEN
            RAISE EXCEPTION 'migration 024: enqueue_many''s definition does not hold its anchor exactly once';
        END IF;
        EXECUTE replace(def, chk_old, chk_new);
    END IF;
END
$mig$;
