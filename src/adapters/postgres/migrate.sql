-- Queries of `stall-nudge migrate`, loaded by adapters/_sql.py. The schema
-- itself is in migration.sql and host_schema.sql, each run as one script.

-- name: existing_relations
-- Which of the named tables or indexes are visible on the search path.
SELECT c.relname FROM pg_class c WHERE c.relname = ANY($1::text[]) AND pg_table_is_visible(c.oid);

-- name: lock
-- Serialise concurrent migrations until this transaction ends.
SELECT pg_advisory_xact_lock(hashtext('stall-nudge migrate'));
