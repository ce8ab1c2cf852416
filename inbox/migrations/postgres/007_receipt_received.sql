-- 007: a receipt records when it was written: the same change as
-- migrations/sqlite/007_receipt_received.sql (received_ms, Unix time in
-- milliseconds from the receiver's clock; NULL for a receipt written
-- before, which counts as written at receipt_epoch.migrated_ms).
ALTER TABLE receipt ADD COLUMN received_ms BIGINT;
CREATE INDEX receipt_received ON receipt (received_ms);
CREATE TABLE receipt_epoch (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    migrated_ms BIGINT NOT NULL
);
INSERT INTO receipt_epoch (id, migrated_ms) VALUES (1, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
