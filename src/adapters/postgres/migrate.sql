-- Queries of `stall-nudge migrate`, loaded by adapters/postgres/sql.py. What it runs
-- is in migrations/ (numbered, each applied once), host_indexes.sql, the footprints
-- (footprint_incremental.sql, footprint_lean.sql) and uninstall.sql.

-- name: lock
-- Serialise concurrent migrations until this session lets go (index builds run outside any transaction): true when taken. A migration waiting in pg_advisory_lock would hold a snapshot that the other's CREATE INDEX CONCURRENTLY waits for: a deadlock. So it tries, and tries again.
SELECT pg_try_advisory_lock(hashtext('stall-nudge migrate'));

-- name: unlock
-- Let the next migration go.
SELECT pg_advisory_unlock(hashtext('stall-nudge migrate'));

-- name: existing_relations
-- Which of the named tables exist: a qualified name (stall_nudge.claims) in its schema, any other visible on the search path. Read from the catalog, so a role without rights on our schema can still ask.
SELECT n
  FROM unnest($1::text[]) AS n
 WHERE EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
                WHERE CASE WHEN position('.' IN n) > 0
                           THEN s.nspname = split_part(n, '.', 1)
                                AND c.relname = split_part(n, '.', 2)
                           ELSE c.relname = n AND pg_table_is_visible(c.oid) END);

-- name: host_schema
-- The schema of the host's todos table, quoted: our trigger functions pin it in their search_path.
SELECT quote_ident(n.nspname)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.oid = 'todos'::regclass;

-- name: bootstrap
-- Our schema and the record of applied migrations, the first thing migrate needs.
CREATE SCHEMA IF NOT EXISTS stall_nudge;
CREATE TABLE IF NOT EXISTS stall_nudge.migrations (
    version    int PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL
);

-- name: applied
-- The migrations this database has applied (none before bootstrap).
SELECT version FROM stall_nudge.migrations ORDER BY version;

-- name: record_migration
-- Record one migration as applied, in its own transaction.
INSERT INTO stall_nudge.migrations (version, name, applied_at) VALUES ($1, $2, now());

-- name: footprint
-- The footprint this database records (NULL: none recorded yet).
SELECT footprint FROM stall_nudge.settings;

-- name: set_footprint
-- Record the footprint, and when it changed.
UPDATE stall_nudge.settings SET footprint = $1, changed_at = now() WHERE footprint <> $1;

-- name: next_tick_full_pass
-- A migration may have changed what the logs hold (a footprint installed, a table restored): the fleet's next tick is a full pass.
UPDATE stall_nudge.sweeps SET full_pass_at = NULL;

-- name: fitting_index
-- A valid btree index of the host's on table $1 whose leading keys are the plain columns $2, with default operator classes and collations, and a predicate in $3 ('' for none): its name, or NULL.
SELECT c.relname
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indexrelid
  JOIN pg_am am ON am.oid = c.relam
 WHERE i.indrelid = $1::regclass AND am.amname = 'btree'
   AND i.indisvalid AND i.indisready AND i.indislive
   AND c.relname NOT LIKE 'stall\_nudge\_%'
   AND i.indnkeyatts >= cardinality($2::text[])
   AND coalesce(pg_get_expr(i.indpred, i.indrelid), '') = ANY ($3::text[])
   AND (SELECT count(*)
          FROM unnest($2::text[]) WITH ORDINALITY AS k (name, n)
          JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[k.n - 1]
          JOIN pg_opclass oc ON oc.oid = i.indclass[k.n - 1]
         WHERE a.attname = k.name AND oc.opcdefault
           AND i.indcollation[k.n - 1] = a.attcollation) = cardinality($2::text[])
 ORDER BY c.relname
 LIMIT 1;

-- name: index_valid
-- Whether the named index is valid (NULL: it does not exist); a failed CONCURRENTLY build leaves it invalid.
SELECT i.indisvalid
  FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
 WHERE c.relname = $1 AND pg_table_is_visible(c.oid);

-- name: index_progress
-- How far the index build of backend $1 has got (pg_stat_progress_create_index).
SELECT phase, blocks_done, blocks_total, tuples_done, tuples_total
  FROM pg_stat_progress_create_index
 WHERE pid = $1;

-- name: our_objects
-- Every object that is ours by its schema (stall_nudge) or its name (queue_stall_nudges, stall_nudge_*), with its definition as the catalog prints it.
SELECT 'schema' AS kind, n.nspname AS name, '' AS on_table, 'schema' AS definition
  FROM pg_namespace n WHERE n.nspname = 'stall_nudge'
UNION ALL
SELECT 'table', CASE WHEN n.nspname = 'stall_nudge' THEN 'stall_nudge.' ELSE '' END || c.relname,
       '',
       (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
                          || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END,
                          ', ' ORDER BY a.attnum)
          FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind = 'r'
   AND (n.nspname = 'stall_nudge'
        OR (pg_table_is_visible(c.oid)
            AND (c.relname = 'queue_stall_nudges' OR c.relname LIKE 'stall\_nudge\_%')))
UNION ALL
SELECT 'index', CASE WHEN n.nspname = 'stall_nudge' THEN 'stall_nudge.' ELSE '' END || c.relname,
       t.relname, pg_get_indexdef(c.oid)
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indexrelid
  JOIN pg_class t ON t.oid = i.indrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'stall_nudge'
    OR (pg_table_is_visible(c.oid) AND c.relname LIKE 'stall\_nudge\_%')
UNION ALL
SELECT 'trigger', g.tgname, c.relname, pg_get_triggerdef(g.oid)
  FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
 WHERE NOT g.tgisinternal AND g.tgname LIKE 'stall\_nudge\_%' AND pg_table_is_visible(c.oid)
UNION ALL
SELECT 'function', CASE WHEN n.nspname = 'stall_nudge' THEN 'stall_nudge.' ELSE '' END || p.proname,
       '', pg_get_functiondef(p.oid)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'stall_nudge'
    OR (p.proname LIKE 'stall\_nudge\_%' AND pg_function_is_visible(p.oid))
 ORDER BY 1, 2, 3;

-- name: index_definition
-- The definition of one index by name, as the catalog prints it (NULL: none).
SELECT c.relname, t.relname AS on_table, pg_get_indexdef(c.oid) AS definition
  FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid JOIN pg_class t ON t.oid = i.indrelid
 WHERE c.relname = $1 AND pg_table_is_visible(c.oid);

-- name: recorded_objects
-- What migrate recorded of the objects it made or relies on.
SELECT kind, name, on_table, ours, definition FROM stall_nudge.objects ORDER BY 1, 2, 3;

-- name: clear_record
-- Forget the objects recorded, before recording them anew.
DELETE FROM stall_nudge.objects;

-- name: record_object
-- Record one object: ours or the host's, and its definition.
INSERT INTO stall_nudge.objects (kind, name, on_table, ours, definition) VALUES ($1, $2, $3, $4, $5);
