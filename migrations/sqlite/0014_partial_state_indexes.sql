-- The state indexes hold only the runs that are not finished, one index per state that a sweep
-- or a claim looks for, instead of every run ever stored: the same indexes as PostgreSQL's
-- migration 14, where they pay (there, a run's ending added an entry to both old indexes).
-- Here a run's ending and a lease renewal write to no state index either; the cost of a text
-- run measured the same before and after (docs/benchmarks.md).
-- Building them reads the table once.
CREATE INDEX responses_queued ON responses (created_at) WHERE state = 'queued';
CREATE INDEX responses_in_progress ON responses (created_at) WHERE state = 'in_progress';
CREATE INDEX responses_requires_action ON responses (expires_at) WHERE state = 'requires_action';
DROP INDEX responses_state;
DROP INDEX responses_expiry;

-- Only indexes change: binaries that know migration 12 run on it.
INSERT INTO schema_compat (version, requires) VALUES (14, 12);
