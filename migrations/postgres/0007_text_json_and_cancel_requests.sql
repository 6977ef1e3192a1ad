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
-- The runs an instance holds: only running runs have a lease holder, so the index stays as small as
-- the number of running runs. The event writer looks a batch's runs up by holder (its fence), and
-- so do lease renewals and endings: without it, PostgreSQL could plan those lookups as a scan of
-- every run (it did, for plans made while the table was empty: each batch read every stored run).
CREATE INDEX responses_lease_owner ON responses (lease_owner) WHERE lease_owner IS NOT NULL;
