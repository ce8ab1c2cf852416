-- 007: a receipt records when it was written (received_ms: Unix time in
-- milliseconds, UTC, the receiver's clock), so that receipts can be kept
-- for a time and then deleted (PruneReceipts; `fairrelay prune --inbox I
-- --receipts-older-than D`, `fairrelay receive --retain-receipts D`). A
-- receipt written before this migration has none (NULL) and counts as
-- written when the migration ran (receipt_epoch, to the millisecond):
-- filling the column in would rewrite every row of an inbox that may be
-- large. A receipt written after it by a process of an older fairrelay
-- still running (it names no received_ms) is dated by the trigger, so that
-- it is not taken for one written before the migration and pruned early.
ALTER TABLE receipt ADD COLUMN received_ms INTEGER;
CREATE INDEX receipt_received ON receipt (received_ms);
CREATE TABLE receipt_epoch (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    migrated_ms INTEGER NOT NULL
);
INSERT INTO receipt_epoch (id, migrated_ms) VALUES (1, CAST(unixepoch('subsec') * 1000 AS INTEGER) + 1);
CREATE TRIGGER receipt_dated AFTER INSERT ON receipt FOR EACH ROW WHEN NEW.received_ms IS NULL
BEGIN
    UPDATE receipt SET received_ms = CAST(unixepoch('subsec') * 1000 AS INTEGER) WHERE event_id = NEW.event_id;
END;
