-- Queries of `stall-nudge migrate`, loaded by adapters/_sql.py. The schema
-- itself is in migration.sql and host_schema.sql, each run as one script.

-- name: existing_relations
-- Which of the named tables or indexes are visible on the search path.
SELECT c.relname FROM pg_class c WHERE c.relname = ANY($1::text[]) AND pg_table_is_visible(c.oid);

-- name: lock
-- Serialise concurrent migrations until this transaction ends.
SELECT pg_advisory_xact_lock(hashtext('stall-nudge migrate'));

-- name: endpoint_ids_are_text
-- Whether the host's endpoint ids are text (or varchar): then id::text is the id itself.
SELECT a.atttypid IN ('text'::regtype, 'varchar'::regtype)
  FROM pg_attribute a
 WHERE a.attrelid = 'endpoints'::regclass AND a.attname = 'id';

-- name: schema_version
-- The schema version the database records (stall_nudge_schema, one row).
SELECT version FROM stall_nudge_schema;

-- name: invalid_indexes
-- Which of the named indexes a failed CREATE INDEX CONCURRENTLY left invalid.
SELECT c.relname FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
 WHERE c.relname = ANY($1::text[]) AND pg_table_is_visible(c.oid) AND NOT i.indisvalid;

-- name: our_triggers
-- Our triggers (stall_nudge_*) and the tables they are on.
SELECT c.relname AS table, t.tgname
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE t.tgname LIKE 'stall\_nudge\_%' AND pg_table_is_visible(c.oid);

-- name: table_rows
-- The planner's row estimate of each named table (-1, never analysed, reads as 0).
SELECT c.relname, greatest(c.reltuples, 0)::float8 AS rows
  FROM pg_class c WHERE c.relname = ANY($1::text[]) AND c.relkind = 'r'
   AND pg_table_is_visible(c.oid);
