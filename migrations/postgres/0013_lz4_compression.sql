-- The JSON texts are compressed with lz4 instead of pglz when they are stored out of line
-- (TOAST): a run's frames, its body and transcript, and its items. pglz took about 8 % of the
-- server's time under a load of text runs; with lz4, the same machine served about 10 % more
-- runs a second, stored in about as much space (docs/benchmarks.md). Values already stored
-- stay as they are: PostgreSQL reads either.
-- A server without lz4 keeps pglz, and the migration says so and goes on: before PostgreSQL 14
-- there is no other method (the statements are run from text, which that version could not
-- parse), and a server built without lz4 refuses it.
DO $$
BEGIN
    IF current_setting('server_version_num')::int < 140000 THEN
        RAISE NOTICE 'PostgreSQL before 14 compresses stored JSON with pglz only';
        RETURN;
    END IF;
    EXECUTE 'ALTER TABLE response_event_frames ALTER COLUMN events SET COMPRESSION lz4';
    EXECUTE 'ALTER TABLE responses ALTER COLUMN body SET COMPRESSION lz4, '
            'ALTER COLUMN transcript SET COMPRESSION lz4';
    EXECUTE 'ALTER TABLE input_items ALTER COLUMN item SET COMPRESSION lz4';
    EXECUTE 'ALTER TABLE output_items ALTER COLUMN item SET COMPRESSION lz4';
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this PostgreSQL server has no lz4: stored JSON stays compressed with pglz';
END $$;

-- Only changes how new values are compressed: binaries that know migration 12 run on it.
INSERT INTO schema_compat (version, requires) VALUES (13, 12);
