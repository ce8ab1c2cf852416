-- 005: a waiver holds its event's id, as a receipt does: a delivery of
-- that id at another flow or seq, with no receipt of it, answers
-- id_conflict unless that place is waived for it too (a breaker's report:
-- a waived id was accepted later at the next seq, its effect applied).
-- Each receive looks the id up.
CREATE INDEX waiver_event ON waiver (event_id);
