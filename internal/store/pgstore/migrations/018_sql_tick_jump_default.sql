-- 018: a SQL caller's explicit tick is checked against a jump of an hour
-- by default. enqueue_many's p_max_tick_jump defaulted to 0 (no limit), so
-- enqueue(id, flow, body, at) from another language took any tick ahead:
-- an at in epoch milliseconds (or a typo) moved the store's clock decades
-- ahead, after which the relay's retention pruned every acked event and
-- tombstone at once (docs/outbox.md). The default is now 3 600 000 ticks,
-- an hour of the daemon's clock and the CLI's --max-tick-jump default;
-- p_max_tick_jump => 0 still sets no limit. The Go library passes every
-- argument itself (its policy's max_tick_jump), so only SQL callers that
-- leave the argument out see the change; an at left NULL (the store's
-- tick) is never checked. The function is restated from its own
-- definition with only that default changed (its body, its settings and
-- its grants as they are), so that this migration cannot drift from the
-- body the earlier ones wrote; run again, it changes nothing.
DO $$
DECLARE
    def TEXT;
BEGIN
    SELECT pg_get_functiondef(p.oid) INTO def
    FROM pg_proc p
    WHERE p.oid = 'enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])'::regprocedure;
    IF position('p_max_tick_jump bigint DEFAULT 3600000,' IN def) > 0 THEN
        RETURN; -- applied already (its record lost): nothing to do
    END IF;
    IF position('p_max_tick_jump bigint DEFAULT 0,' IN def) = 0 THEN
        RAISE EXCEPTION 'migration 018: enqueue_many''s definition has no "p_max_tick_jump bigint DEFAULT 0,"';
    END IF;
    EXECUTE replace(def, 'p_max_tick_jump bigint DEFAULT 0,', 'p_max_tick_jump bigint DEFAULT 3600000,');
END
$$;
