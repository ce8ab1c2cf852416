-- 003: one clock row per writer lane (store.Lane), so that enqueuers,
-- claimers and settlers no longer wait for each other:
--   * row 1 is the claim lane: its ticket is the ticket of SPEC §2;
--   * row 2 is the enqueue lane: its flows is the count of flows created
--     (the creation order, ord);
--   * row 3 is the settle lane (settle and redrive).
-- The tick of SPEC §2 is the largest tick of the rows. A writer locks its
-- own lanes' rows (after the lanes' advisory locks) and reads the others as
-- last committed. The flow rows several lanes write are guarded by row
-- locks (FOR NO KEY UPDATE); see Tx in tx.go.
ALTER TABLE clock DROP CONSTRAINT clock_id_check;
ALTER TABLE clock ADD CONSTRAINT clock_lane CHECK (id IN (1, 2, 3));
INSERT INTO clock (id, tick, ticket, flows) SELECT 2, tick, ticket, flows FROM clock WHERE id = 1;
INSERT INTO clock (id, tick, ticket, flows) SELECT 3, tick, ticket, flows FROM clock WHERE id = 1;
-- ord is handed out by the enqueue lane alone, one writer at a time; its
-- unique index only cost an index entry on every new flow row version (a
-- claim or a settle writes one). The fair order reads (served, ord) through
-- flow_runnable_fair.
ALTER TABLE flow DROP CONSTRAINT flow_ord_key;
