-- (PostgreSQL's twin also turns its `jsonb` columns into text; here JSON was always text.)
-- When a client asked to cancel a running run through an instance that does not execute it
-- (milliseconds); the instance holding the run's lease stops it. Cleared when the run leaves
-- `in_progress`.
ALTER TABLE responses ADD COLUMN cancel_requested_at BIGINT;
-- The runs an instance holds: only running runs have a lease holder, so the index stays as small as
-- the number of running runs. The event writer looks a batch's runs up by holder (its fence), and
-- so do lease renewals and endings: without it, PostgreSQL could plan those lookups as a scan of
-- every run (it did, for plans made while the table was empty: each batch read every stored run).
CREATE INDEX responses_lease_owner ON responses (lease_owner) WHERE lease_owner IS NOT NULL;
