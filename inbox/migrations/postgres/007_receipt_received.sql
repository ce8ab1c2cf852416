-- 007: a receipt records when it was written: the same change as
-- migrations/sqlite/007_receipt_received.sql (received_ms, Unix time in
-- milliseconds from the receiver's clock; NULL for a receipt written
-- before, which counts as written at receipt_epoch.migrated_ms). The
-- default, set after the column is added (so that no existing row is
-- rewritten), dates the receipts a process of an older fairrelay still
-- running writes without one.
ALTER TABLE receipt ADD COLUMN received_ms BIGINT;
ALTER TABLE receipt ALTER COLUMN received_ms SET DEFAULT (ceil(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
CREATE INDEX receipt_received ON receipt (received_ms);
CREATE TABLE receipt_epoch (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    migrated_ms BIGINT NOT NULL
);
INSERT INTO receipt_epoch (id, migrated_ms) VALUES (1, ceil(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
