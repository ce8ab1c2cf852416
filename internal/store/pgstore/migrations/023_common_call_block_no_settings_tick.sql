-- 023: two enqueue paths that broke SPEC §10, from a breaker's report.
--
-- The outbox's common call (one event onto a flow that exists, migration
-- 016) holds its flow's row while its insert waits for another
-- transaction's uncommitted event of the same id. When that transaction's
-- next call enqueues onto this flow, the two wait for each other, and the
-- call failed with deadlock_detected (it ran outside any attempt). Its
-- statement now runs in a block: ended by the deadlock detector, it lets
-- the flow go and the call goes the general way, which starts over until
-- the other transaction has committed, and answers.
--
-- A call that made a new flow for an id another transaction stored
-- meanwhile recorded its tick on the settings row, and held that row until
-- the caller's commit: every other call losing such a race, and a
-- configure, waited for it. Now the call starts over (FR006, caught by
-- enqueue_many's attempts): the id is known then, and its flow takes the
-- tick, as for any existing or conflict answer.
--
-- Both functions are restated from their own definitions with anchors that
-- must each occur exactly once (checked); run again, nothing changes.
DO $mig$
DECLARE
    def TEXT;
    decl_old CONSTANT TEXT := $a$    v_now    BIGINT;  -- the stored tick read again after the locks (migration 019)
$a$;
    decl_new CONSTANT TEXT := $a$    v_now    BIGINT;  -- the stored tick read again after the locks (migration 019)
    v_fast   BOOLEAN := false; -- the common call's statement found its flow (migration 023)
$a$;
    fast_old CONSTANT TEXT := $a$        WITH lk AS (
            SELECT f.seq + 1 AS new_seq, f.head_seq FROM flow f
            WHERE f.flow_id = p_flows[1] AND f.group_id IS NULL
              AND NOT EXISTS (SELECT 1 FROM event e WHERE e.event_id = p_ids[1])
              AND NOT EXISTS (SELECT 1 FROM tombstone t WHERE t.event_id = p_ids[1])
            FOR NO KEY UPDATE OF f SKIP LOCKED
        ), ins AS (
            INSERT INTO event (event_id, flow_id, seq, body, own_state, generation, attempts, lifetime_attempts,
                               reason, next_at, lease_until, enqueued_at)
            SELECT p_ids[1], p_flows[1], lk.new_seq, p_bodies[1], 'ready', 0, 0, 0, NULL, v_at, 0, v_at FROM lk
            ON CONFLICT (event_id) DO NOTHING
            RETURNING event.seq
        ), upd AS (
            UPDATE flow f SET seq = ins.seq,
                runnable = CASE WHEN f.head_seq = ins.seq THEN true ELSE f.runnable END,
                wait_until = CASE WHEN f.head_seq = ins.seq THEN NULL ELSE f.wait_until END,
                tick = greatest(f.tick, v_at)
            FROM ins WHERE f.flow_id = p_flows[1]
            RETURNING f.head_seq = ins.seq AS woke
        )
        SELECT lk.new_seq, lk.head_seq, (SELECT u.woke FROM upd u) AS woke INTO hd FROM lk;
        IF FOUND THEN
$a$;
    fast_new CONSTANT TEXT := $a$        -- Migration 023: the statement in a block of its own. It holds
        -- the flow's row while its insert waits for another transaction's
        -- uncommitted event of the same id; when that transaction then
        -- waits for this flow (its next call enqueues onto it), the
        -- deadlock detector ends one of the two, and without the block
        -- this call failed with deadlock_detected, though it can let the
        -- flow go and answer (SPEC §10; a breaker's report). Ended, the
        -- block lets the flow go, and the call goes the general way, which
        -- starts over until the other has committed.
        BEGIN
            WITH lk AS (
                SELECT f.seq + 1 AS new_seq, f.head_seq FROM flow f
                WHERE f.flow_id = p_flows[1] AND f.group_id IS NULL
                  AND NOT EXISTS (SELECT 1 FROM event e WHERE e.event_id = p_ids[1])
                  AND NOT EXISTS (SELECT 1 FROM tombstone t WHERE t.event_id = p_ids[1])
                FOR NO KEY UPDATE OF f SKIP LOCKED
            ), ins AS (
                INSERT INTO event (event_id, flow_id, seq, body, own_state, generation, attempts, lifetime_attempts,
                                   reason, next_at, lease_until, enqueued_at)
                SELECT p_ids[1], p_flows[1], lk.new_seq, p_bodies[1], 'ready', 0, 0, 0, NULL, v_at, 0, v_at FROM lk
                ON CONFLICT (event_id) DO NOTHING
                RETURNING event.seq
            ), upd AS (
                UPDATE flow f SET seq = ins.seq,
                    runnable = CASE WHEN f.head_seq = ins.seq THEN true ELSE f.runnable END,
                    wait_until = CASE WHEN f.head_seq = ins.seq THEN NULL ELSE f.wait_until END,
                    tick = greatest(f.tick, v_at)
                FROM ins WHERE f.flow_id = p_flows[1]
                RETURNING f.head_seq = ins.seq AS woke
            )
            SELECT lk.new_seq, lk.head_seq, (SELECT u.woke FROM upd u) AS woke INTO hd FROM lk;
            v_fast := FOUND;
        EXCEPTION WHEN deadlock_detected THEN
            v_fast := false;
        END;
        IF v_fast THEN
$a$;
    lost_old CONSTANT TEXT := $a$                            UPDATE settings s SET tick = v_at WHERE s.id = 1 AND s.tick < v_at;
$a$;
    lost_new CONSTANT TEXT := $a$                            -- Migration 023: not on the settings row, which it
                            -- held until the caller's commit, so that every
                            -- other call losing such a race, and a configure,
                            -- waited for this transaction (SPEC §10: no row all
                            -- enqueues share; a breaker's report). Start over:
                            -- the id is stored now, and its flow takes the tick.
                            RAISE EXCEPTION USING ERRCODE = 'FR006';
$a$;
    h_old CONSTANT TEXT := $a$    EXCEPTION WHEN SQLSTATE 'FR001' THEN
$a$;
    h_new CONSTANT TEXT := $a$    EXCEPTION WHEN SQLSTATE 'FR006' THEN
        -- Migration 023: the call's id was stored by another transaction
        -- while this one made a flow for it; nothing is written (the
        -- subtransaction rolled back). Start over at once: the id is
        -- known now, and the answer is existing or conflict.
        IF attempt = 10 THEN
            RAISE;
        END IF;
    WHEN SQLSTATE 'FR001' THEN
$a$;
    und_old CONSTANT TEXT := $a$        IF v_undone THEN
            -- The flow was rolled back: the tick goes on the settings row
            -- (the store's tick is the largest of these rows', SPEC §2).
            UPDATE settings s SET tick = v_at WHERE s.id = 1 AND s.tick < v_at;
        ELSE
$a$;
    und_new CONSTANT TEXT := $a$        IF v_undone THEN
            -- Migration 023: the id was stored meanwhile and nothing was
            -- made for it; the tick went on the settings row, held until
            -- the caller's commit (SPEC §10: no row all enqueues share).
            -- enqueue_many starts the call over, and the id's flow takes
            -- the tick.
            RAISE EXCEPTION USING ERRCODE = 'FR006';
        ELSE
$a$;
BEGIN
    SELECT pg_get_functiondef(p.oid) INTO def
    FROM pg_proc p
    WHERE p.oid = 'enqueue_many(text[], text[], bytea[], bigint, boolean, bigint, integer, text[])'::regprocedure;
    IF position('Migration 023:' IN def) = 0 THEN
        IF (length(def) - length(replace(def, decl_old, ''))) / length(decl_old) <> 1
           OR (length(def) - length(replace(def, fast_old, ''))) / length(fast_old) <> 1
           OR (length(def) - length(replace(def, lost_old, ''))) / length(lost_old) <> 1
           OR (length(def) - length(replace(def, h_old, ''))) / length(h_old) <> 1 THEN
            RAISE EXCEPTION 'migration 023: enqueue_many''s definition does not hold its anchors exactly once';
        END IF;
        def := replace(def, decl_old, decl_new);
        def := replace(def, fast_old, fast_new);
        def := replace(def, lost_old, lost_new);
        def := replace(def, h_old, h_new);
        EXECUTE def;
    END IF;

    SELECT pg_get_functiondef(p.oid) INTO def
    FROM pg_proc p
    WHERE p.oid = 'enqueue_events(text[], text[], bytea[], text[], bigint, bigint, bigint, bigint)'::regprocedure;
    IF position('Migration 023:' IN def) = 0 THEN
        IF (length(def) - length(replace(def, und_old, ''))) / length(und_old) <> 1 THEN
            RAISE EXCEPTION 'migration 023: enqueue_events''s definition does not hold its anchor exactly once';
        END IF;
        def := replace(def, und_old, und_new);
        EXECUTE def;
    END IF;
END
$mig$;
