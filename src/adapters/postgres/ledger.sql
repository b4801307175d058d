-- The Postgres ledger's other statements: the tick lock, refunds, the incremental
-- footprint's idle test and backlog compaction, the fleet's sweep record, and
-- inspection. Each query starts with a "-- name: NAME" line and a one-line
-- description; adapters/postgres/sql.py loads them once, with every {{rule(...)}}
-- expanded from rules.sql. The tick's charging statements are built from the parts in
-- tick.sql. Every policy number arrives as a parameter from PacingPolicy.

-- name: tick_lock
-- Take the fleet's tick lock for this transaction (or learn another instance holds it), then read the time and the fleet's record.
-- $1 the tick lock's key, $2 statement and lock timeout (ms, as text), for the rest of this transaction.
-- The record read here is this statement's snapshot, taken before the lock: enough for an
-- instance that did not get the lock to pace itself by. One that did reads it again
-- (tick_record). Transaction-level only, so it works behind a transaction-pooling PgBouncer.
-- It also marks the transaction as a sweep's (its drains need no change logged) and turns
-- JIT off (compiling a statement of a few index probes costs far more than running it).
SELECT l.got, clock_timestamp() AS now, s.swept_at, s.full_pass_at,
       coalesce(f.footprint, 'lean') AS footprint
  FROM (SELECT set_config('statement_timeout', $2, true),
               set_config('lock_timeout', $2, true),
               set_config('stall_nudge.sweeping', 'on', true),
               set_config('jit', 'off', true),
               pg_try_advisory_xact_lock($1) AS got
        OFFSET 0) l
  LEFT JOIN stall_nudge.sweeps s ON true
  LEFT JOIN stall_nudge.settings f ON true;

-- name: tick_record
-- With the tick lock held: the time and the fleet's record, in a snapshot taken after the lock.
-- The sweep before this one committed before the lock was free, so it is seen here: a
-- sweep's "now" is never earlier than that commit, and the fleet never sweeps twice
-- within an interval because one snapshot predates the other's commit.
SELECT clock_timestamp() AS now, s.swept_at, s.full_pass_at,
       coalesce(f.footprint, 'lean') AS footprint
  FROM (SELECT 1) one
  LEFT JOIN stall_nudge.sweeps s ON true
  LEFT JOIN stall_nudge.settings f ON true;

-- name: record_sweep
-- The fleet's record of this sweep: when it swept (database time) and at what interval, and for a full pass when and how long it took.
-- $1 now, $2 the sweeping instance's interval (ms; NULL: keep the last), $3 now if this was a
-- full pass (NULL: keep the last), $4 the full pass's duration (ms; NULL: keep the last).
INSERT INTO stall_nudge.sweeps AS s (swept_at, interval_ms, full_pass_at, full_pass_ms)
VALUES ($1, $2, $3, $4)
ON CONFLICT (singleton) DO UPDATE
   SET swept_at = EXCLUDED.swept_at,
       interval_ms = coalesce(EXCLUDED.interval_ms, s.interval_ms),
       full_pass_at = coalesce(EXCLUDED.full_pass_at, s.full_pass_at),
       full_pass_ms = coalesce(EXCLUDED.full_pass_ms, s.full_pass_ms);

-- name: hold_tick
-- Wait for the fleet's tick lock and hold it until this transaction ends: sweeps skip meanwhile.
-- $1 the tick lock's key.
SELECT pg_advisory_xact_lock($1);

-- name: refund
-- Take back a nudge that reached no receiver: compare-and-set on the row its charge wrote.
-- $1 endpoint_id, $2 queue, $3 the nudge's number, $4 its charged_at (the stamp it wrote).
-- A later charge changed the stamp and a drain deleted the row: neither is undone. Run
-- after hold_tick in the same transaction, so no sweep's snapshot straddles a refund.
UPDATE queue_stall_nudges r
   SET nudges = nudges - 1
 WHERE {{pair_is(r, $1, $2)}} AND nudges = $3 AND last_nudged_at = $4
RETURNING nudges;

-- name: anything_to_judge
-- Whether the incremental footprint's usual tick has a pair to judge, run first: planning its charging statement costs more than this whole test.
-- $1..$4 as the tick. Each branch is one source of its pairs: a logged claim of a pair with a
-- ledger row (progress, a drain), a pair held back, a change past the threshold (an
-- endpoint's included), a ledger row whose backoff ended (a range scan per count). When
-- there is none, every logged claim is of a pair with no ledger row, and it is consumed
-- here as the judging part would: a busy host's claims need no judging of their own (a
-- pair with no ledger row and no held entry has its work behind changes in the log).
-- The snapshot is taken after the tick read the clock: it sees every commit before "now".
WITH judge AS (
    -- OFFSET 0: one probe of the ledger's pair index per claim, never a hash of the ledger.
    SELECT EXISTS (SELECT 1 FROM stall_nudge.claims c
                    WHERE EXISTS (SELECT 1 FROM queue_stall_nudges n
                                   WHERE {{pair_is(n, c.endpoint_id, c.queue)}} OFFSET 0))
        OR EXISTS (SELECT 1 FROM stall_nudge.held)
        OR EXISTS (SELECT 1 FROM stall_nudge.changes x WHERE {{stalled(x.look_after, $1, $2)}})
        OR EXISTS (SELECT 1
                     FROM generate_series(0, $4 - 1) AS s (nudges)
                    WHERE EXISTS (SELECT 1 FROM queue_stall_nudges r
                                   WHERE r.nudges = s.nudges
                                     AND {{backoff_ended(s.nudges, r.last_nudged_at, $1, $3)}}))
           AS judge
),
absorbed AS (
    DELETE FROM stall_nudge.claims c WHERE NOT (SELECT j.judge FROM judge j)
)
SELECT j.judge FROM judge j;

-- name: backlog
-- Whether a log holds at least $3 rows a tick would read: then the tick compacts the logs first, a range at a time.
-- $1 now, $2 threshold (µs), $3 rows. A sweeper outage leaves the logs holding every
-- claim and arrival since; one statement reading them all may not finish within the
-- tick's timeout, and a tick rolled back leaves them to grow. A log smaller than 28
-- bytes a row (a heap row's header and line pointer) cannot hold $3 rows and is not
-- counted: a tick in a storm of changes reads a few of them, not all.
SELECT CASE WHEN pg_relation_size('stall_nudge.claims') >= $3 * 28
            THEN (SELECT count(*) FROM (SELECT 1 FROM stall_nudge.claims LIMIT $3) c) >= $3
            ELSE false END
    OR CASE WHEN pg_relation_size('stall_nudge.changes') >= $3 * 28
            THEN (SELECT count(*)
                    FROM (SELECT 1 FROM stall_nudge.changes x
                           WHERE {{stalled(x.look_after, $1, $2)}} LIMIT $3) x) >= $3
            ELSE false END;

-- name: log_blocks
-- How many blocks a log has ($1 its name): the compaction goes through them a range at a time.
SELECT pg_relation_size($1::regclass) / current_setting('block_size')::bigint;

-- name: compact_claims
-- Compact the logged claims in the log's blocks from tid $1 up to $2: delete those no tick will read.
-- What every charge does to the claims it sees (claim_superseded, as in the judging
-- part's absorbed). Behind the tick lock no charge writes a ledger row meanwhile.
DELETE FROM stall_nudge.claims c
 USING (SELECT k.ctid AS at, {{claim_rank(k)}} AS newest
          FROM stall_nudge.claims k
         WHERE k.ctid >= $1::tid AND k.ctid < $2::tid) k
 WHERE c.ctid = k.at AND {{claim_superseded(k.newest, c)}};

-- name: compact_changes
-- Collapse the changes past the threshold in the log's blocks from tid $3 up to $4: of each pair's (or endpoint's), keep the oldest.
-- $1 now, $2 threshold (µs). A tick judges a pair on the current rows at its oldest
-- change past the threshold that its cut reaches; a later one past the threshold
-- bounds no work the oldest does not, so it would only have the pair judged again.
-- Changes within the threshold wait for their own time: each stays.
DELETE FROM stall_nudge.changes x
 USING (SELECT k.ctid AS at,
               row_number() OVER (PARTITION BY k.endpoint_id, k.queue
                                  ORDER BY k.look_after, k.ctid) AS oldest
          FROM stall_nudge.changes k
         WHERE k.ctid >= $3::tid AND k.ctid < $4::tid
           AND {{stalled(k.look_after, $1, $2)}}) k
 WHERE x.ctid = k.at AND k.oldest > 1;

-- name: now
-- The database's clock, the time authority every decision is measured on.
SELECT clock_timestamp();

-- name: ledger_rows
-- Every ledger row, for inspection and status.
SELECT endpoint_id, queue, nudges, last_nudged_at FROM queue_stall_nudges;

-- name: count_ledger_rows
-- How many ledger rows there are (the metrics' gauge, read after each tick).
SELECT count(*) FROM queue_stall_nudges;

-- name: sweep_record
-- The fleet's sweep record and footprint, for status and migrate --check.
SELECT s.swept_at, s.interval_ms, s.full_pass_at, s.full_pass_ms,
       coalesce(f.footprint, 'lean') AS footprint
  FROM (SELECT 1) one
  LEFT JOIN stall_nudge.sweeps s ON true
  LEFT JOIN stall_nudge.settings f ON true;
