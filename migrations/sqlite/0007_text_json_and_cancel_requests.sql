-- (PostgreSQL's twin also turns its `jsonb` columns into text; here JSON was always text.)
-- When a client asked to cancel a running run through an instance that does not execute it
-- (milliseconds); the instance holding the run's lease stops it. Cleared when the run leaves
-- `in_progress`.
ALTER TABLE responses ADD COLUMN cancel_requested_at BIGINT;
