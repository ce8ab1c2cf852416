-- 003: a receipt keeps the SHA-256 of the body it was received with, not
-- the body. The body served only to tell a duplicate (same id, flow, seq
-- and body) from an id_conflict, and kept every body ever received: an
-- inbox grew by the size of the traffic, without end. A receipt written
-- from this migration on has an empty body and its hash in body_sha256;
-- one written before keeps its body (body_sha256 NULL) and is compared by
-- it. The body column stays NOT NULL: dropping that in SQLite rewrites the
-- table, for the whole of an inbox that may be large.
ALTER TABLE receipt ADD COLUMN body_sha256 BLOB;
