-- 003: a receipt keeps the SHA-256 of the body it was received with, not
-- the body: the same change as migrations/sqlite/003_receipt_sha256.sql
-- (new receipts: an empty body, the hash in body_sha256; older ones keep
-- their body and a NULL hash).
ALTER TABLE receipt ADD COLUMN body_sha256 BYTEA;
