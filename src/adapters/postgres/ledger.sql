-- The Postgres ledger's other statements: the tick lock, the fleet's record, refunds,
-- and inspection. Each query starts with a "-- name: NAME" line and a
-- one-line description; adapters/postgres/sql.py loads them once, with every
-- {{rule(...)}} expanded from rules.sql and each @table qualified with the host's schema.
-- The tick's charging statements are built from the parts in tick.sql. Every policy
-- number arrives as a parameter from PacingPolicy.

-- name: guest
-- Make this transaction a guest's, and read the host's schema: from here on it resolves functions, operators and types in pg_catalog alone (then its own temporary schema), so nothing another role creates in the host's schema ever runs as ours.
-- Local to the transaction: the session's own search_path (an embedder's pool) is untouched.
-- The host's tables are named with the schema migrate recorded (NULL: not migrated).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true),
       (SELECT g.host_schema FROM stall_nudge.settings g) AS host_schema;

-- name: tick_lock
-- Take the fleet's tick lock for this transaction (or learn another instance holds it), then read the time and when the fleet last swept.
-- $1 the tick lock's key, $2 statement and lock timeout (ms, as text), for the rest of this
-- transaction. It also makes the transaction a guest's (guest) and turns JIT off (compiling a
-- statement of a few index probes costs far more than running it). The record read here is
-- this statement's snapshot, taken before the lock: enough for an instance that did not get
-- the lock to pace itself by. One that did reads the whole record (tick_record). Transaction-level
-- only, so it works behind a transaction-pooling PgBouncer. Every name is qualified: the
-- session's search_path still holds when this statement is parsed.
SELECT l.got, pg_catalog.clock_timestamp() AS now, s.swept_at
  FROM (SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true),
               pg_catalog.set_config('statement_timeout', $2, true),
               pg_catalog.set_config('lock_timeout', $2, true),
               pg_catalog.set_config('jit', 'off', true),
               pg_catalog.pg_try_advisory_xact_lock($1) AS got
        OFFSET 0) l
  LEFT JOIN stall_nudge.sweeps s ON true;

-- name: tick_record
-- With the tick lock held: the time and the fleet's record, in a snapshot taken after the lock.
-- The sweep before this one committed before the lock was free, so it is seen here: a
-- sweep's "now" is never earlier than that commit, and the fleet never sweeps twice
-- within an interval because one snapshot predates the other's commit.
SELECT clock_timestamp() AS now, s.swept_at, s.judged_to, s.full_pass_at, s.full_pass_pairs,
       g.host_schema
  FROM (SELECT 1) one
  LEFT JOIN stall_nudge.sweeps s ON true
  LEFT JOIN stall_nudge.settings g ON true;

-- name: plan_once
-- From here on in this transaction, plan each statement once per connection, whatever its values.
-- The judging statement's plan does not depend on them (every read of a host table is one
-- descent for one pair), and planning it costs more than running it on a few pairs. The
-- delta's finding statement, whose range scans do depend on them, runs before this.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true);

-- name: record_sweep
-- The fleet's record of this sweep: when it swept (database time) and at what interval, what it judged, and for a full pass when, how long and how many pairs.
-- $1 now, $2 the sweeping instance's interval (ms; NULL: keep the last), $3 the tick's kind
-- (delta or full), $4 pairs judged, $5 how long it took (ms; kept for a full pass).
-- judged_to is where the next delta reads from (less its lookback).
INSERT INTO stall_nudge.sweeps AS s (swept_at, interval_ms, judged_to, last_kind, last_judged,
                                     full_pass_at, full_pass_ms, full_pass_pairs)
VALUES ($1, $2, $1, $3, $4, CASE WHEN $3 = 'full' THEN $1::timestamptz END,
        CASE WHEN $3 = 'full' THEN $5::float8 END, CASE WHEN $3 = 'full' THEN $4::int END)
ON CONFLICT (singleton) DO UPDATE
   SET swept_at = EXCLUDED.swept_at,
       interval_ms = coalesce(EXCLUDED.interval_ms, s.interval_ms),
       judged_to = EXCLUDED.judged_to,
       last_kind = EXCLUDED.last_kind,
       last_judged = EXCLUDED.last_judged,
       full_pass_at = coalesce(EXCLUDED.full_pass_at, s.full_pass_at),
       full_pass_ms = coalesce(EXCLUDED.full_pass_ms, s.full_pass_ms),
       full_pass_pairs = coalesce(EXCLUDED.full_pass_pairs, s.full_pass_pairs);

-- name: hold_tick
-- Wait for the fleet's tick lock and hold it until this transaction ends: sweeps skip meanwhile.
-- $1 the tick lock's key.
SELECT pg_advisory_xact_lock($1);

-- name: refund
-- Take back a nudge that reached no receiver: compare-and-set on the row its charge wrote.
-- mirrors stall_core.refunded_row
-- $1 endpoint_id, $2 queue, $3 the nudge's number, $4 its charged_at (the stamp it wrote),
-- $5 the todo it named. A later charge changed the stamp or the named todo, a reset the
-- count, a drain deleted the row: none is undone. Run after hold_tick in the same
-- transaction, so no sweep's snapshot straddles it.
UPDATE @queue_stall_nudges r
   SET nudges = nudges - 1
 WHERE {{pair_is(r, $1, $2)}} AND nudges = $3 AND last_nudged_at = $4 AND named_todo = $5
RETURNING nudges;

-- name: now
-- The database's clock, the time authority every decision is measured on.
SELECT clock_timestamp();

-- name: ledger_rows
-- Every ledger row, for inspection and tests.
SELECT endpoint_id, queue, nudges, last_nudged_at, named_todo, progressed_at
  FROM @queue_stall_nudges;

-- name: count_ledger_rows
-- How many ledger rows there are (the metrics' gauge, read after a tick that may change it).
SELECT count(*) FROM @queue_stall_nudges;

-- name: sweep_record
-- The fleet's record of its sweeps, for status.
SELECT s.swept_at, s.interval_ms, s.last_kind, s.last_judged, s.full_pass_at, s.full_pass_ms,
       s.full_pass_pairs
  FROM (SELECT 1) one
  LEFT JOIN stall_nudge.sweeps s ON true;
