-- PostgreSQL's migration 13 compresses stored JSON with lz4; SQLite does not compress, and
-- only records the migration, so that both backends know the same versions.
INSERT INTO schema_compat (version, requires) VALUES (13, 12);
