-- Queries of `stall-nudge migrate`, loaded by adapters/postgres/sql.py: the catalog
-- reads that plan a migration, a check and an uninstall. What a plan runs is in
-- migrations/ (numbered, each applied once), host_indexes.sql, and the statements
-- adapters.postgres._plan, _steps, _grants and _uninstall write from these reads. Those
-- the start-up check sends (host_schemas to record_readable, has_privileges) may run
-- under the caller's search_path, so every name in them is qualified; migrate resolves
-- names in pg_catalog alone for the whole of its session.

-- name: lock
-- Serialise concurrent migrations until this session lets go (index builds run outside any transaction): true when taken. A migration waiting in pg_advisory_lock would hold a snapshot that the other's CREATE INDEX CONCURRENTLY waits for: a deadlock. So it tries, and tries again.
SELECT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtext('stall-nudge migrate'));

-- name: unlock
-- Let the next migration go.
SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtext('stall-nudge migrate'));

-- name: search_path
-- The session's search_path, to put back when migrate is done.
SELECT pg_catalog.current_setting('search_path');

-- name: set_search_path
-- Resolve names in pg_catalog alone (then pg_temp) for the rest of this session, or put the caller's back ($1).
SELECT pg_catalog.set_config('search_path', $1, false);

-- name: guest_path
-- Resolve names in pg_catalog alone (then pg_temp) until this transaction ends: a guest's search_path ($1), whatever the session's.
SELECT pg_catalog.set_config('search_path', $1, true);

-- name: host_schemas
-- The schemas holding all of the host's tables $1, in name order: the host's schema is one a DBA names, the one migrate recorded, or the only one of these. Read from the catalog alone, whatever the caller's search_path.
SELECT n.nspname::pg_catalog.text AS name
  FROM pg_catalog.pg_namespace n
 WHERE (SELECT pg_catalog.count(*)
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace OPERATOR(pg_catalog.=) n.oid
           AND c.relname::pg_catalog.text OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[])
           AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p}'::pg_catalog."char"[]))
       OPERATOR(pg_catalog.=) pg_catalog.cardinality($1::pg_catalog.text[])
 ORDER BY 1;

-- name: missing_tables
-- Which of the tables $2 this database lacks: a qualified name (stall_nudge.held) in its schema, any other in the host's schema $1. Read from the catalog alone, whatever the caller's search_path.
SELECT t
  FROM pg_catalog.unnest($2::pg_catalog.text[]) WITH ORDINALITY AS w (t, i)
 WHERE NOT EXISTS (
        SELECT 1
          FROM pg_catalog.pg_class c
          JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
         WHERE c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p}'::pg_catalog."char"[])
           AND n.nspname::pg_catalog.text OPERATOR(pg_catalog.=)
               CASE WHEN pg_catalog.strpos(w.t, '.') OPERATOR(pg_catalog.>) 0
                    THEN pg_catalog.split_part(w.t, '.', 1) ELSE $1::pg_catalog.text END
           AND c.relname::pg_catalog.text OPERATOR(pg_catalog.=)
               CASE WHEN pg_catalog.strpos(w.t, '.') OPERATOR(pg_catalog.>) 0
                    THEN pg_catalog.split_part(w.t, '.', 2) ELSE w.t END)
 ORDER BY w.i;

-- name: recorded
-- The host's schema migrate recorded, read qualified (NULL: none). Only asked when record_readable says the record is there.
SELECT host_schema FROM stall_nudge.settings;

-- name: record_readable
-- Whether this build's record of the host's schema is there for this role to read: false before this build's first migrate, or for a role that may not read it.
SELECT EXISTS (
    SELECT 1
      FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
      JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.oid
     WHERE n.nspname OPERATOR(pg_catalog.=) 'stall_nudge'::pg_catalog.name
       AND c.relname OPERATOR(pg_catalog.=) 'settings'::pg_catalog.name
       AND a.attname OPERATOR(pg_catalog.=) 'host_schema'::pg_catalog.name
       AND NOT a.attisdropped
       AND pg_catalog.has_schema_privilege(n.oid, 'USAGE')
       AND pg_catalog.has_table_privilege(c.oid, 'SELECT'));

-- name: applied
-- The migrations this database has applied (none before the first).
SELECT version FROM stall_nudge.migrations ORDER BY version;

-- name: namespaces
-- The oids of our schema and of the host's ($1).
SELECT (SELECT oid FROM pg_namespace WHERE nspname = 'stall_nudge') AS ours,
       (SELECT oid FROM pg_namespace WHERE nspname = $1) AS host;

-- name: objects
-- Every object of ours in the catalog: whatever is in our schema ($1), whatever carries our prefix in the host's ($2), the indexes and triggers with our prefix on the host's tables ($3), and every trigger, rule, policy and row-level security on our tables (no build of ours makes one: code another role hangs on our tables), with the definition migrate compares (a view's: its columns, and the columns of other tables it reads). In the scratch schema the host's tables are copies: never ours.
WITH ours AS (
    SELECT c.oid, c.relname, c.relkind
      FROM pg_class c
     WHERE (c.relnamespace = $1
            OR (c.relnamespace = $2 AND c.relname LIKE 'stall\_nudge\_%'))
       AND NOT (c.relnamespace = $2 AND c.relname = ANY ($3::name[]))
       AND c.relkind <> ALL ('{i,I,t,c}')
),
tables AS (
    SELECT c.oid FROM pg_class c
     WHERE c.oid = ANY (ARRAY(SELECT o.oid FROM ours o
                                                     WHERE o.relkind = ANY ('{r,p}')))
        OR (c.relnamespace = $2
            AND c.relname = ANY ($3::name[]))
)
SELECT CASE o.relkind WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view'
                     WHEN 'S' THEN 'sequence' WHEN 'f' THEN 'foreign table' ELSE 'table' END AS kind,
       o.relname::text AS name, ''::text AS on_table,
       (SELECT json_agg(json_build_object(
                   'name', a.attname, 'type', format_type(a.atttypid, a.atttypmod),
                   'not_null', a.attnotnull,
                   'default', pg_get_expr(d.adbin, d.adrelid)) ORDER BY a.attnum)::text
          FROM pg_attribute a
          LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid
                                           AND d.adnum = a.attnum
         WHERE a.attrelid = o.oid AND a.attnum > 0
           AND NOT a.attisdropped)
       || coalesce(' reads ' || (
           SELECT string_agg(DISTINCT t.relname || '.' || a.attname, ', '
                              ORDER BY t.relname || '.' || a.attname)
             FROM pg_rewrite r
             JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                             AND d.refclassid = 'pg_class'::regclass AND d.refobjsubid > 0
                             AND d.refobjid <> o.oid
             JOIN pg_class t ON t.oid = d.refobjid
             JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
            WHERE r.ev_class = o.oid AND r.rulename = '_RETURN'), '') AS definition,
       true AS valid
  FROM ours o
UNION ALL
SELECT 'index', c.relname::text, t.relname::text,
       CASE WHEN i.indisunique THEN 'unique ' ELSE '' END
       || substring(pg_get_indexdef(c.oid), ' USING (.*)$'),
       i.indisvalid
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indexrelid
  JOIN pg_class t ON t.oid = i.indrelid
 WHERE i.indrelid = ANY (ARRAY(SELECT o.oid FROM ours o))
    OR (i.indrelid = ANY (ARRAY(SELECT x.oid FROM tables x))
        AND c.relname LIKE 'stall\_nudge\_%')
UNION ALL
SELECT 'constraint', k.conname::text, t.relname::text,
       pg_get_constraintdef(k.oid), true
  FROM pg_constraint k
  JOIN pg_class t ON t.oid = k.conrelid
 WHERE k.conrelid = ANY (ARRAY(SELECT o.oid FROM ours o))
   AND k.contype <> ALL ('{p,u}')
UNION ALL
SELECT 'trigger', g.tgname::text, t.relname::text,
       pg_get_triggerdef(g.oid), true
  FROM pg_trigger g
  JOIN pg_class t ON t.oid = g.tgrelid
 WHERE NOT g.tgisinternal
   AND (g.tgrelid = ANY (ARRAY(SELECT o.oid FROM ours o))
        OR (g.tgrelid = ANY (ARRAY(SELECT x.oid FROM tables x))
            AND g.tgname LIKE 'stall\_nudge\_%'))
UNION ALL
SELECT 'rule', r.rulename::text, t.relname::text, pg_get_ruledef(r.oid), true
  FROM pg_rewrite r
  JOIN pg_class t ON t.oid = r.ev_class
 WHERE r.ev_class = ANY (ARRAY(SELECT o.oid FROM ours o)) AND r.rulename <> '_RETURN'
UNION ALL
SELECT 'policy', y.polname::text, t.relname::text,
       coalesce(pg_get_expr(y.polqual, y.polrelid), '') || ' / '
       || coalesce(pg_get_expr(y.polwithcheck, y.polrelid), ''), true
  FROM pg_policy y
  JOIN pg_class t ON t.oid = y.polrelid
 WHERE y.polrelid = ANY (ARRAY(SELECT o.oid FROM ours o))
UNION ALL
SELECT 'row security', 'enabled', t.relname::text,
       CASE WHEN t.relforcerowsecurity THEN 'forced' ELSE 'enabled' END, true
  FROM pg_class t
 WHERE t.oid = ANY (ARRAY(SELECT o.oid FROM ours o))
   AND (t.relrowsecurity OR t.relforcerowsecurity)
UNION ALL
SELECT 'function',
       p.proname::text || '('
       || pg_get_function_identity_arguments(p.oid)
       || ')',
       '', md5(pg_get_functiondef(p.oid)), true
  FROM pg_proc p
 WHERE p.pronamespace = $1
    OR (p.pronamespace = $2 AND p.proname LIKE 'stall\_nudge\_%')
 ORDER BY 1, 2, 3;

-- name: endpoint_name
-- The host's column endpoints.name in schema $1, if any: its type, and whether its text form is PostgreSQL's own (a type in pg_catalog, or a domain over one). Only then does our view of endpoints read it: a type another role made could run its code as whoever reads the view.
SELECT format_type(a.atttypid, a.atttypmod) AS type,
       coalesce(b.typnamespace, y.typnamespace) = 'pg_catalog'::regnamespace AS own
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_type y ON y.oid = a.atttypid
  LEFT JOIN pg_type b ON b.oid = y.typbasetype
 WHERE n.nspname = $1 AND c.relname = 'endpoints' AND c.relkind = ANY ('{r,p}')
   AND a.attname = 'name' AND a.attnum > 0 AND NOT a.attisdropped;

-- name: view_reads_name
-- Whether our view of the host's endpoints reads the host's column "name" (migrate made it so where the host has one): only then does a sweeping role need SELECT on it. The start-up check runs it under the caller's search_path: every name is qualified.
SELECT EXISTS (
    SELECT 1
      FROM pg_catalog.pg_class v
      JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) v.relnamespace
      JOIN pg_catalog.pg_rewrite r ON r.ev_class OPERATOR(pg_catalog.=) v.oid
      JOIN pg_catalog.pg_depend d ON d.objid OPERATOR(pg_catalog.=) r.oid
      JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) d.refobjid
                                    AND a.attnum OPERATOR(pg_catalog.=) d.refobjsubid
     WHERE n.nspname OPERATOR(pg_catalog.=) 'stall_nudge'::pg_catalog.name
       AND v.relname OPERATOR(pg_catalog.=) 'host_endpoints'::pg_catalog.name
       AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_rewrite'::pg_catalog.regclass
       AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
       AND d.refobjid OPERATOR(pg_catalog.<>) v.oid
       AND a.attname OPERATOR(pg_catalog.=) 'name'::pg_catalog.name);

-- name: fitting_index
-- A valid btree index of the host's on table $1 whose leading keys are the plain columns $2, with default operator classes and collations, and a predicate in $3 ('' for none): its name, or NULL.
SELECT c.relname::text
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indexrelid
  JOIN pg_am am ON am.oid = c.relam
 WHERE i.indrelid = $1::regclass
   AND am.amname = 'btree'
   AND i.indisvalid AND i.indisready AND i.indislive
   AND NOT c.relname LIKE 'stall\_nudge\_%'
   AND i.indnkeyatts >= cardinality($2::text[])
   AND coalesce(pg_get_expr(i.indpred, i.indrelid), '')
       = ANY ($3::text[])
   AND (SELECT count(*)
          FROM unnest($2::text[]) WITH ORDINALITY AS k (name, n)
          JOIN pg_attribute a
            ON a.attrelid = i.indrelid
           AND a.attnum = i.indkey[k.n - 1]
          JOIN pg_opclass oc
            ON oc.oid = i.indclass[k.n - 1]
         WHERE a.attname = k.name AND oc.opcdefault
           AND i.indcollation[k.n - 1] = a.attcollation)
       = cardinality($2::text[])
 ORDER BY c.relname
 LIMIT 1;

-- name: index_progress
-- How far the index build of backend $1 has got (pg_stat_progress_create_index).
SELECT phase, blocks_done, blocks_total, tuples_done, tuples_total
  FROM pg_stat_progress_create_index
 WHERE pid = $1;

-- name: recorded_grants
-- The roles migrate --grant recorded, and the privileges it gave each ("kind|target|column|privilege", the host's schema and tables written as Privilege.target has them): what --uninstall revokes.
SELECT role, given FROM stall_nudge.grants ORDER BY role;

-- name: has_privileges
-- Which of the privileges $2 (each "kind|target|column|privilege") role $1 lacks. A schema or table that is not there is not asked about (missing_tables names it); nor is a table in a schema the role may not use (its USAGE is asked about first). The start-up check runs it under the caller's search_path: every name is qualified.
SELECT w.p
  FROM pg_catalog.unnest($2::pg_catalog.text[]) AS w (p)
 CROSS JOIN LATERAL (SELECT pg_catalog.split_part(w.p, '|', 1) AS kind,
                            pg_catalog.split_part(w.p, '|', 2) AS target,
                            pg_catalog.split_part(w.p, '|', 3) AS col,
                            pg_catalog.split_part(w.p, '|', 4) AS privilege) x
 WHERE NOT CASE
           WHEN x.kind OPERATOR(pg_catalog.=) 'schema'
           THEN NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace
                             WHERE nspname::pg_catalog.text OPERATOR(pg_catalog.=) x.target)
                OR pg_catalog.has_schema_privilege($1, x.target, x.privilege)
           WHEN x.kind OPERATOR(pg_catalog.=) 'table'
           THEN pg_catalog.to_regclass(x.target) IS NULL
                OR pg_catalog.has_table_privilege($1, pg_catalog.to_regclass(x.target), x.privilege)
           ELSE pg_catalog.to_regclass(x.target) IS NULL
                OR pg_catalog.has_column_privilege($1, pg_catalog.to_regclass(x.target), x.col,
                                                   x.privilege)
           END;

-- name: not_grantable
-- Which of the privileges $1 (as has_privileges takes them) this role may not give: it lacks the grant option (an owner, a member of the owner and a superuser hold it).
SELECT w.p
  FROM unnest($1::text[]) AS w (p)
 CROSS JOIN LATERAL (SELECT split_part(w.p, '|', 1) AS kind, split_part(w.p, '|', 2) AS target,
                            split_part(w.p, '|', 3) AS col,
                            split_part(w.p, '|', 4) || ' WITH GRANT OPTION' AS privilege) x
 WHERE NOT CASE x.kind
           WHEN 'schema' THEN has_schema_privilege(x.target, x.privilege)
           WHEN 'table' THEN has_table_privilege(to_regclass(x.target), x.privilege)
           ELSE has_column_privilege(to_regclass(x.target), x.col, x.privilege)
           END;

-- name: superuser
-- Whether this role is a superuser.
SELECT rolsuper FROM pg_roles WHERE rolname = current_user;

-- name: given_our_schema
-- Whether our schema's owner gave this role (or a role it belongs to, not PUBLIC) USAGE on it: a sweeping role of that install.
SELECT EXISTS (SELECT 1
                 FROM pg_namespace n, aclexplode(n.nspacl) a
                WHERE n.nspname = 'stall_nudge' AND a.privilege_type = 'USAGE'
                  AND a.grantee <> 0 AND a.grantor = n.nspowner
                  AND pg_has_role(current_user, a.grantee, 'MEMBER'));

-- name: role_kind
-- Role $1 as --grant asks about it (no row: no such role): a superuser needs no grant, and a predefined role (pg_*) is PostgreSQL's, never ours to change.
SELECT rolsuper AS superuser, rolname LIKE 'pg\_%' AS predefined FROM pg_roles WHERE rolname = $1;

-- name: others_may_create
-- The roles other than the schema's owner that may CREATE in schema $1 (PUBLIC included): code they plant there could shadow what a less careful guest calls.
SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
            ELSE pg_get_userbyid(a.grantee)::text END
  FROM pg_namespace n,
       aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
 WHERE n.nspname = $1 AND a.privilege_type = 'CREATE'
   AND a.grantee <> n.nspowner
 ORDER BY 1;

-- name: owners
-- Who owns what carries one of our names: our schema, everything in it, and in the host's schema ($1) every relation with our prefix. Each with its kind, the table an index is on, its owner, and whether this role may trust it: the owner is this role, a role it is granted (a superuser's implicit membership does not count), or a superuser.
WITH RECURSIVE mine (oid) AS (
    SELECT oid FROM pg_roles WHERE rolname = current_user
    UNION
    SELECT m.roleid FROM pg_auth_members m JOIN mine ON m.member = mine.oid
),
found (kind, schema, name, on_table, owner) AS (
    SELECT 'schema', n.nspname::text, n.nspname::text, '', n.nspowner
      FROM pg_namespace n
     WHERE n.nspname = 'stall_nudge'
    UNION ALL
    SELECT CASE c.relkind WHEN 'i' THEN 'index' WHEN 'I' THEN 'index' WHEN 'v' THEN 'view'
                          WHEN 'm' THEN 'materialized view' WHEN 'S' THEN 'sequence'
                          WHEN 'f' THEN 'foreign table' WHEN 'c' THEN 'type' ELSE 'table' END,
           n.nspname::text, c.relname::text, coalesce(t.relname::text, ''), c.relowner
      FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_index i ON i.indexrelid = c.oid
      LEFT JOIN pg_class t ON t.oid = i.indrelid
     WHERE n.nspname = 'stall_nudge'
        OR (n.nspname = $1 AND c.relname LIKE 'stall\_nudge\_%')
    UNION ALL
    SELECT 'function', n.nspname::text,
           p.proname::text || '(' || pg_get_function_identity_arguments(p.oid) || ')', '',
           p.proowner
      FROM pg_proc p
      JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = 'stall_nudge'
)
SELECT f.kind, f.schema, f.name, f.on_table, r.rolname::text AS owner,
       (f.owner IN (SELECT oid FROM mine) OR r.rolsuper) AS trusted
  FROM found f
  JOIN pg_roles r ON r.oid = f.owner
 ORDER BY f.kind <> 'schema', f.schema, f.kind, f.name;
