-- 007: a receipt records when it was written (received_ms: Unix time in
-- milliseconds, UTC, the receiver's clock), so that receipts can be kept
-- for a time and then deleted (PruneReceipts; `fairrelay prune --inbox I
-- --receipts-older-than D`, `fairrelay receive --retain-receipts D`). A
-- receipt written before this migration has none (NULL) and counts as
-- written when the migration ran (receipt_epoch): filling the column in
-- would rewrite every row of an inbox that may be large.
ALTER TABLE receipt ADD COLUMN received_ms INTEGER;
CREATE INDEX receipt_received ON receipt (received_ms);
CREATE TABLE receipt_epoch (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    migrated_ms INTEGER NOT NULL
);
INSERT INTO receipt_epoch (id, migrated_ms) VALUES (1, CAST(strftime('%s', 'now') AS INTEGER) * 1000);
