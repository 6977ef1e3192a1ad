-- Which binaries can run on this schema. A migration's row names the oldest migration a
-- binary must know to run on a schema that has it: a binary finds migrations of a newer
-- release applied and starts when each of them allows it (expand/contract; see "Upgrades and
-- rollback" in docs/operations.md). Every migration from this one on adds its own row.
CREATE TABLE schema_compat (
    version   BIGINT PRIMARY KEY,
    requires  BIGINT NOT NULL
);
-- The migrations before this policy each need a binary that knows them; this one only adds
-- the table, which binaries that know migration 9 do not read.
INSERT INTO schema_compat (version, requires) VALUES
    (1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 6), (7, 7), (8, 8), (9, 9), (10, 9);
