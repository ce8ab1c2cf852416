-- 006: an event records the process of its latest claim (claimed_by, the
-- claim's relay name; '' when the claimer gave none), so that an attempt
-- whose lease ran out unsettled (status lease_expired, written by a later
-- claim, often another relay's) names the relay that lost it: the one to
-- look at after a crash. PostgreSQL migration 027 is the same.
ALTER TABLE event ADD COLUMN claimed_by TEXT NOT NULL DEFAULT '';
