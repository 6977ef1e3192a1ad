-- JSON is kept as the text serde_json wrote instead of `jsonb`: `jsonb` cannot hold U+0000 in a
-- string (a tool result or a model's text may carry one; the text `\u0000` is stored as is), and
-- the service reads and writes these values whole, never inside them. Text is also cheaper to
-- write: `jsonb` parsed every body and transcript on each save.
ALTER TABLE responses ALTER COLUMN body TYPE TEXT USING body::text;
ALTER TABLE responses ALTER COLUMN transcript DROP DEFAULT;
ALTER TABLE responses ALTER COLUMN transcript TYPE TEXT USING transcript::text;
ALTER TABLE responses ALTER COLUMN transcript SET DEFAULT '[]';
ALTER TABLE input_items ALTER COLUMN item TYPE TEXT USING item::text;
-- When a client asked to cancel a running run through an instance that does not execute it
-- (milliseconds); the instance holding the run's lease stops it. Cleared when the run leaves
-- `in_progress`.
ALTER TABLE responses ADD COLUMN cancel_requested_at BIGINT;
