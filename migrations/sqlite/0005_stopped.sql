-- When a run stopped (milliseconds; NULL while it can still change). Pruning finds the runs past
-- the retention window through this index, instead of reading every stopped run through the
-- state index (measured: with 26,000 stopped runs that held SQLite's writer ~80 ms per sweep).
ALTER TABLE responses ADD COLUMN stopped_at BIGINT;
UPDATE responses SET stopped_at = updated_at
    WHERE state IN ('completed', 'failed', 'incomplete', 'cancelled', 'expired');
CREATE INDEX responses_stopped ON responses (stopped_at) WHERE stopped_at IS NOT NULL;
