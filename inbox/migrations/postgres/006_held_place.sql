-- 006: a held copy is kept per place too: the same change as
-- migrations/sqlite/006_held_place.sql.
ALTER TABLE held DROP CONSTRAINT held_pkey;
ALTER TABLE held ADD PRIMARY KEY (event_id, body_sha256, flow_id, seq);
