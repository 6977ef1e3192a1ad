-- No query reads runs by (tenant_id, created_at), but a run's lookup by tenant and id could: a
-- statement prepared while the table was empty got a generic plan through this index, and then
-- read every run of the tenant to find one (measured on PostgreSQL: 13 ms per lookup with 20,000
-- runs, until autovacuum's first ANALYZE of the table). Without it, only the primary key matches
-- such a lookup. A listing of a tenant's runs brings the index it needs.
DROP INDEX IF EXISTS responses_tenant_created;
