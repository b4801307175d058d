-- statement: tick_lock
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

-- statement: tick_record
-- With the tick lock held: the time and the fleet's record, in a snapshot taken after the lock.
-- The sweep before this one committed before the lock was free, so it is seen here: a
-- sweep's "now" is never earlier than that commit, and the fleet never sweeps twice
-- within an interval because one snapshot predates the other's commit.
SELECT clock_timestamp() AS now, s.swept_at, s.full_pass_at,
       coalesce(f.footprint, 'lean') AS footprint
  FROM (SELECT 1) one
  LEFT JOIN stall_nudge.sweeps s ON true
  LEFT JOIN stall_nudge.settings f ON true;

-- statement: record_sweep
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

-- statement: hold_tick
-- Wait for the fleet's tick lock and hold it until this transaction ends: sweeps skip meanwhile.
-- $1 the tick lock's key.
SELECT pg_advisory_xact_lock($1);

-- statement: refund
-- Take back a nudge that reached no receiver: compare-and-set on the row its charge wrote.
-- $1 endpoint_id, $2 queue, $3 the nudge's number, $4 its charged_at (the stamp it wrote).
-- A later charge changed the stamp and a drain deleted the row: neither is undone. Run
-- after hold_tick in the same transaction, so no sweep's snapshot straddles a refund.
UPDATE queue_stall_nudges r
   SET nudges = nudges - 1
 WHERE (md5(r.endpoint_id) = md5($1::text) AND md5(r.queue) = md5($2::text)
 AND r.endpoint_id = $1 AND r.queue = $2) AND nudges = $3 AND last_nudged_at = $4
RETURNING nudges;

-- statement: anything_to_judge
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
                                   WHERE (md5(n.endpoint_id) = md5(c.endpoint_id::text) AND md5(n.queue) = md5(c.queue::text)
 AND n.endpoint_id = c.endpoint_id AND n.queue = c.queue) OFFSET 0))
        OR EXISTS (SELECT 1 FROM stall_nudge.held)
        OR EXISTS (SELECT 1 FROM stall_nudge.changes x WHERE (x.look_after < $1::timestamptz - $2::bigint * interval '1 microsecond'))
        OR EXISTS (SELECT 1
                     FROM generate_series(0, $4 - 1) AS s (nudges)
                    WHERE EXISTS (SELECT 1 FROM queue_stall_nudges r
                                   WHERE r.nudges = s.nudges
                                     AND (r.last_nudged_at <= $1::timestamptz - (($3::bigint[])[LEAST(GREATEST(s.nudges, 1), cardinality($3::bigint[]))]
 * interval '1 microsecond'))))
           AS judge
),
absorbed AS (
    DELETE FROM stall_nudge.claims c WHERE NOT (SELECT j.judge FROM judge j)
)
SELECT j.judge FROM judge j;

-- statement: backlog
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
                           WHERE (x.look_after < $1::timestamptz - $2::bigint * interval '1 microsecond') LIMIT $3) x) >= $3
            ELSE false END;

-- statement: log_blocks
-- How many blocks a log has ($1 its name): the compaction goes through them a range at a time.
SELECT pg_relation_size($1::regclass) / current_setting('block_size')::bigint;

-- statement: compact_claims
-- Compact the logged claims in the log's blocks from tid $1 up to $2: delete those no tick will read.
-- What every charge does to the claims it sees (claim_superseded, as in the judging
-- part's absorbed). Behind the tick lock no charge writes a ledger row meanwhile.
DELETE FROM stall_nudge.claims c
 USING (SELECT k.ctid AS at, row_number() OVER (PARTITION BY k.endpoint_id, k.queue
                   ORDER BY k.claimed_at DESC, k.ctid DESC) AS newest
          FROM stall_nudge.claims k
         WHERE k.ctid >= $1::tid AND k.ctid < $2::tid) k
 WHERE c.ctid = k.at AND (k.newest > 1
 OR NOT EXISTS (SELECT 1 FROM queue_stall_nudges superseded_n
                 WHERE (md5(superseded_n.endpoint_id) = md5(c.endpoint_id::text) AND md5(superseded_n.queue) = md5(c.queue::text)
 AND superseded_n.endpoint_id = c.endpoint_id AND superseded_n.queue = c.queue)));

-- statement: compact_changes
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
           AND (k.look_after < $1::timestamptz - $2::bigint * interval '1 microsecond')) k
 WHERE x.ctid = k.at AND k.oldest > 1;

-- statement: now
-- The database's clock, the time authority every decision is measured on.
SELECT clock_timestamp();

-- statement: ledger_rows
-- Every ledger row, for inspection and status.
SELECT endpoint_id, queue, nudges, last_nudged_at FROM queue_stall_nudges;

-- statement: count_ledger_rows
-- How many ledger rows there are (the metrics' gauge, read after each tick).
SELECT count(*) FROM queue_stall_nudges;

-- statement: sweep_record
-- The fleet's sweep record and footprint, for status and migrate --check.
SELECT s.swept_at, s.interval_ms, s.full_pass_at, s.full_pass_ms,
       coalesce(f.footprint, 'lean') AS footprint
  FROM (SELECT 1) one
  LEFT JOIN stall_nudge.sweeps s ON true
  LEFT JOIN stall_nudge.settings f ON true;

-- statement: tick_lean
-- tick_lean: find_every_pair + judge + report
WITH RECURSIVE
-- The full pass: every pair with a pending todo, with a ledger row, or held back.
-- Defines found and cut (none: a full pass judges every change). Cost follows pairs,
-- not todos: one descent of the pending index per pair with pending work (a skip
-- scan: each step asks for the first entry past the pair before).
pending_pairs AS (
    (SELECT t.endpoint_id, t.queue FROM todos t
      WHERE t.state = 'pending' AND (octet_length(t.endpoint_id::text) + octet_length(t.queue) <= 2000)
      ORDER BY t.endpoint_id, t.queue
      LIMIT 1)
    UNION ALL
    SELECT n.endpoint_id, n.queue
      FROM pending_pairs p
     CROSS JOIN LATERAL (SELECT t.endpoint_id, t.queue FROM todos t
                          WHERE t.state = 'pending' AND (octet_length(t.endpoint_id::text) + octet_length(t.queue) <= 2000)
                            AND (t.endpoint_id, t.queue) > (p.endpoint_id, p.queue)
                          ORDER BY t.endpoint_id, t.queue
                          LIMIT 1) n
),
found AS (
    SELECT p.endpoint_id::text AS endpoint_id, p.queue FROM pending_pairs p
    UNION
    -- Pairs whose names are too long for the pending index: rare, their own index.
    SELECT t.endpoint_id::text, t.queue FROM todos t
     WHERE t.state = 'pending' AND (octet_length(t.endpoint_id::text) + octet_length(t.queue) > 2000)
    UNION
    SELECT r.endpoint_id, r.queue FROM queue_stall_nudges r
    UNION
    SELECT h.endpoint_id, h.queue FROM stall_nudge.held h
),
cut AS (
    SELECT NULL::timestamptz AS look_after WHERE false
),
-- Judge each pair found on the current rows, by the core's rules, and act on it: charge
-- the best tick_limit due pairs, delete the rows of pairs left with no work and of pairs
-- with progress it does not charge, and consume the logged claims. Reads found; defines
-- judged, drained, assessed, ranked, due, inserted, advanced, charged, reset and absorbed. Rows are written by ctid (a TID scan), each
-- compare-and-set on its columns as locked: the due predicate re-checked at lock time.
judged AS MATERIALIZED (
    -- Each pair with its oldest work and its ledger row, either possibly absent. Every
    -- lookup is one index descent per pair (LIMIT 1 keeps each a nested loop).
    SELECT f.endpoint_id, f.queue, k.key, w.todo, w.id AS todo_id, w.created_at,
           r.ctid AS row_ctid, r.nudges AS row_nudges, r.last_nudged_at
      FROM found f
     CROSS JOIN LATERAL (SELECT (json_populate_record(NULL::endpoints, json_build_object('id', f.endpoint_id::text))).id AS key) k
      LEFT JOIN LATERAL (SELECT oldest_w.todo, oldest_w.id, oldest_w.created_at
  FROM ((SELECT work_t.id AS todo, work_t.id::text AS id, work_t.created_at
           FROM todos work_t
          WHERE work_t.endpoint_id = k.key AND work_t.queue = f.queue
            AND (octet_length(work_t.endpoint_id::text) + octet_length(work_t.queue) <= 2000) AND (work_t.state = 'pending' AND work_t.queue <> $6 AND (work_t.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = work_t.delivery_id AND gate_d.verified)))
          ORDER BY work_t.created_at, work_t.id::text COLLATE "C"
          LIMIT 1)
        UNION ALL
        (SELECT long_t.id, long_t.id::text, long_t.created_at
           FROM todos long_t
          WHERE (md5(long_t.endpoint_id::text) = md5(f.endpoint_id::text) AND md5(long_t.queue) = md5(f.queue::text)
 AND long_t.endpoint_id::text = f.endpoint_id AND long_t.queue = f.queue)
            AND (octet_length(long_t.endpoint_id::text) + octet_length(long_t.queue) > 2000) AND (long_t.state = 'pending' AND long_t.queue <> $6 AND (long_t.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = long_t.delivery_id AND gate_d.verified)))
          ORDER BY long_t.created_at, long_t.id::text COLLATE "C"
          LIMIT 1)) oldest_w
 ORDER BY oldest_w.created_at, oldest_w.id COLLATE "C"
 LIMIT 1) w ON true
      LEFT JOIN LATERAL (SELECT r.ctid, r.nudges, r.last_nudged_at
                           FROM queue_stall_nudges r
                          WHERE (md5(r.endpoint_id) = md5(f.endpoint_id::text) AND md5(r.queue) = md5(f.queue::text)
 AND r.endpoint_id = f.endpoint_id AND r.queue = f.queue)
                          LIMIT 1) r ON true
),
drained AS (
    -- A ledger row whose pair has no work left. Matching its nudges and last_nudged_at
    -- re-checks the row as locked: a row another sweeper charged since this snapshot
    -- (an older build sweeping without the tick lock) stays.
    DELETE FROM queue_stall_nudges n
     WHERE n.ctid = ANY (ARRAY(SELECT j.row_ctid FROM judged j
                                WHERE j.todo_id IS NULL AND j.row_ctid IS NOT NULL))
       AND (n.endpoint_id, n.queue, n.nudges, n.last_nudged_at)
           IN (SELECT j.endpoint_id, j.queue, j.row_nudges, j.last_nudged_at FROM judged j
                WHERE j.todo_id IS NULL)
    RETURNING n.endpoint_id, n.queue
),
assessed AS MATERIALIZED (
    -- Each pair with work: whether it is a candidate now (stalled: work past the
    -- threshold, endpoint active, an enabled hook covering the queue), and, with a ledger
    -- row, its progress: the latest claim after the row's last nudge, logged (commit
    -- order) or by its claimed_at (the host's rows). "fresh": nudge 1 is due at once (no
    -- row, or progress); otherwise the row's count stands, 0 only for a refunded first
    -- nudge.
    SELECT j.endpoint_id, j.queue, j.todo, j.todo_id, j.created_at, j.row_ctid, j.row_nudges,
           j.last_nudged_at, c.candidate, p.progress_at,
           (j.row_ctid IS NULL OR p.progress_at IS NOT NULL) AS fresh,
           CASE WHEN j.row_ctid IS NULL OR p.progress_at IS NOT NULL THEN 0
                ELSE j.row_nudges END AS spent
      FROM judged j
     CROSS JOIN LATERAL (
            SELECT (j.created_at < $1::timestamptz - $2::bigint * interval '1 microsecond')
                   AND EXISTS (SELECT 1 FROM endpoints active_e WHERE active_e.id = j.key AND active_e.state = 'active')
                   AND EXISTS (SELECT 1 FROM notify_hooks receiver_h WHERE (receiver_h.endpoint_id = j.key AND receiver_h.enabled
 AND (receiver_h.queues IS NULL OR j.queue = ANY (receiver_h.queues)))) AS candidate) c
     CROSS JOIN LATERAL (
            SELECT GREATEST((SELECT max(logged_c.claimed_at) FROM stall_nudge.claims logged_c
  WHERE (md5(logged_c.endpoint_id) = md5(j.endpoint_id::text) AND md5(logged_c.queue) = md5(j.queue::text)
 AND logged_c.endpoint_id = j.endpoint_id AND logged_c.queue = j.queue)),
                            CASE WHEN j.row_ctid IS NOT NULL
                                 THEN GREATEST((SELECT claimed_t.claimed_at FROM todos claimed_t
           WHERE claimed_t.endpoint_id = j.key AND claimed_t.queue = j.queue
             AND claimed_t.claimed_at > j.last_nudged_at AND (octet_length(claimed_t.endpoint_id::text) + octet_length(claimed_t.queue) <= 2000)
           ORDER BY claimed_t.claimed_at DESC
           LIMIT 1),
         (SELECT claimed_l.claimed_at FROM todos claimed_l
           WHERE (md5(claimed_l.endpoint_id::text) = md5(j.endpoint_id::text) AND md5(claimed_l.queue) = md5(j.queue::text)
 AND claimed_l.endpoint_id::text = j.endpoint_id AND claimed_l.queue = j.queue)
             AND claimed_l.claimed_at > j.last_nudged_at AND (octet_length(claimed_l.endpoint_id::text) + octet_length(claimed_l.queue) > 2000)
           ORDER BY claimed_l.claimed_at DESC
           LIMIT 1))
                            END) AS progress_at) p
     WHERE j.todo_id IS NOT NULL
),
ranked AS (
    -- Every due pair, ranked in charge order.
    SELECT a.*,
           row_number() OVER (ORDER BY a.spent, a.created_at, a.endpoint_id COLLATE "C", a.queue COLLATE "C") AS rank
      FROM assessed a
     WHERE a.candidate AND (a.fresh OR (a.spent < $4 AND (a.last_nudged_at <= $1::timestamptz - (($3::bigint[])[LEAST(GREATEST(a.spent, 1), cardinality($3::bigint[]))]
 * interval '1 microsecond'))))
),
due AS (
    -- The best tick_limit. The stamp is now, or the latest claim this charge consumes
    -- if later, so the claim is never "after the last nudge" again.
    SELECT r.*, GREATEST($1::timestamptz, r.progress_at) AS stamp
      FROM ranked r
     WHERE r.rank <= $5
),
inserted AS (
    -- A pair with no row in this snapshot gets nudge 1. A row that appeared since (an
    -- older build sweeping without the tick lock, during a deploy) is a conflict:
    -- nothing is charged for the pair this tick.
    INSERT INTO queue_stall_nudges AS n (endpoint_id, queue, nudges, last_nudged_at)
    SELECT d.endpoint_id, d.queue, d.spent + 1, d.stamp
      FROM due d
     WHERE d.row_nudges IS NULL
    ON CONFLICT ((md5(endpoint_id)), (md5(queue))) DO NOTHING
    RETURNING n.endpoint_id, n.queue, n.nudges, n.last_nudged_at
),
advanced AS (
    -- Compare-and-set on the row as locked: it must still be the row this snapshot
    -- decided on (same count and stamp). Behind the tick lock (refunds take it too) it
    -- always is; a row an older build charged or deleted since is left alone.
    UPDATE queue_stall_nudges n
       SET nudges = d.spent + 1, last_nudged_at = d.stamp
      FROM due d
     WHERE n.ctid = ANY (ARRAY(SELECT k.row_ctid FROM due k WHERE k.row_ctid IS NOT NULL))
       AND d.endpoint_id = n.endpoint_id AND d.queue = n.queue
       AND d.row_nudges = n.nudges AND d.last_nudged_at = n.last_nudged_at
    RETURNING n.endpoint_id, n.queue, n.nudges, n.last_nudged_at
),
charged AS (
    SELECT * FROM inserted UNION ALL SELECT * FROM advanced
),
reset AS (
    -- A row with progress this tick does not charge (held back by the tick limit, or no
    -- candidate now) goes: its next nudge is a first one, due at once, as progress makes
    -- it, and its claims need no second look (stall_core.Reset). Compare-and-set as drained.
    DELETE FROM queue_stall_nudges n
     WHERE n.ctid = ANY (ARRAY(SELECT a.row_ctid FROM assessed a
                                WHERE a.row_ctid IS NOT NULL AND a.progress_at IS NOT NULL
                                  AND (a.endpoint_id, a.queue)
                                      NOT IN (SELECT d.endpoint_id, d.queue FROM due d)))
       AND (n.endpoint_id, n.queue, n.nudges, n.last_nudged_at)
           IN (SELECT a.endpoint_id, a.queue, a.row_nudges, a.last_nudged_at FROM assessed a
                WHERE a.progress_at IS NOT NULL)
    RETURNING n.endpoint_id, n.queue
),
absorbed AS (
    -- A logged claim is progress once: consumed with its pair's charge or drain; a
    -- pair with no ledger row starts over anyway; of the others only the latest is ever
    -- read. A claim that commits after this snapshot stays for the next tick. Which
    -- claim is a pair's latest comes from one sort of the log (a plan that spills
    -- rather than degrades once the log is long), not a probe per claim.
    DELETE FROM stall_nudge.claims c
     USING (SELECT k.ctid AS at, row_number() OVER (PARTITION BY k.endpoint_id, k.queue
                   ORDER BY k.claimed_at DESC, k.ctid DESC) AS newest FROM stall_nudge.claims k) k
     WHERE c.ctid = k.at
       AND ((k.newest > 1
 OR NOT EXISTS (SELECT 1 FROM queue_stall_nudges superseded_n
                 WHERE (md5(superseded_n.endpoint_id) = md5(c.endpoint_id::text) AND md5(superseded_n.queue) = md5(c.queue::text)
 AND superseded_n.endpoint_id = c.endpoint_id AND superseded_n.queue = c.queue)))
            OR EXISTS (SELECT 1 FROM charged x
                        WHERE x.endpoint_id = c.endpoint_id AND x.queue = c.queue)
            OR EXISTS (SELECT 1 FROM drained x
                        WHERE x.endpoint_id = c.endpoint_id AND x.queue = c.queue)
            OR EXISTS (SELECT 1 FROM reset x
                        WHERE x.endpoint_id = c.endpoint_id AND x.queue = c.queue))
)
-- What the tick did: each charge (with the todo it names; the title is read for these
-- few only) in charge order, then each drained pair. Reads charged, due and drained.
SELECT 'charge' AS kind, c.endpoint_id, c.queue, c.nudges, c.last_nudged_at,
       d.todo_id, d.created_at, t.title, d.rank
  FROM charged c
  JOIN due d ON d.endpoint_id = c.endpoint_id AND d.queue = c.queue
  JOIN todos t ON t.id = d.todo
UNION ALL
SELECT 'drain', x.endpoint_id, x.queue, NULL, NULL, NULL, NULL, NULL, NULL
  FROM drained x
ORDER BY 1, 9

-- statement: tick_full
-- tick_full: find_every_pair + judge + keep_hints + report
WITH RECURSIVE
-- The full pass: every pair with a pending todo, with a ledger row, or held back.
-- Defines found and cut (none: a full pass judges every change). Cost follows pairs,
-- not todos: one descent of the pending index per pair with pending work (a skip
-- scan: each step asks for the first entry past the pair before).
pending_pairs AS (
    (SELECT t.endpoint_id, t.queue FROM todos t
      WHERE t.state = 'pending' AND (octet_length(t.endpoint_id::text) + octet_length(t.queue) <= 2000)
      ORDER BY t.endpoint_id, t.queue
      LIMIT 1)
    UNION ALL
    SELECT n.endpoint_id, n.queue
      FROM pending_pairs p
     CROSS JOIN LATERAL (SELECT t.endpoint_id, t.queue FROM todos t
                          WHERE t.state = 'pending' AND (octet_length(t.endpoint_id::text) + octet_length(t.queue) <= 2000)
                            AND (t.endpoint_id, t.queue) > (p.endpoint_id, p.queue)
                          ORDER BY t.endpoint_id, t.queue
                          LIMIT 1) n
),
found AS (
    SELECT p.endpoint_id::text AS endpoint_id, p.queue FROM pending_pairs p
    UNION
    -- Pairs whose names are too long for the pending index: rare, their own index.
    SELECT t.endpoint_id::text, t.queue FROM todos t
     WHERE t.state = 'pending' AND (octet_length(t.endpoint_id::text) + octet_length(t.queue) > 2000)
    UNION
    SELECT r.endpoint_id, r.queue FROM queue_stall_nudges r
    UNION
    SELECT h.endpoint_id, h.queue FROM stall_nudge.held h
),
cut AS (
    SELECT NULL::timestamptz AS look_after WHERE false
),
-- Judge each pair found on the current rows, by the core's rules, and act on it: charge
-- the best tick_limit due pairs, delete the rows of pairs left with no work and of pairs
-- with progress it does not charge, and consume the logged claims. Reads found; defines
-- judged, drained, assessed, ranked, due, inserted, advanced, charged, reset and absorbed. Rows are written by ctid (a TID scan), each
-- compare-and-set on its columns as locked: the due predicate re-checked at lock time.
judged AS MATERIALIZED (
    -- Each pair with its oldest work and its ledger row, either possibly absent. Every
    -- lookup is one index descent per pair (LIMIT 1 keeps each a nested loop).
    SELECT f.endpoint_id, f.queue, k.key, w.todo, w.id AS todo_id, w.created_at,
           r.ctid AS row_ctid, r.nudges AS row_nudges, r.last_nudged_at
      FROM found f
     CROSS JOIN LATERAL (SELECT (json_populate_record(NULL::endpoints, json_build_object('id', f.endpoint_id::text))).id AS key) k
      LEFT JOIN LATERAL (SELECT oldest_w.todo, oldest_w.id, oldest_w.created_at
  FROM ((SELECT work_t.id AS todo, work_t.id::text AS id, work_t.created_at
           FROM todos work_t
          WHERE work_t.endpoint_id = k.key AND work_t.queue = f.queue
            AND (octet_length(work_t.endpoint_id::text) + octet_length(work_t.queue) <= 2000) AND (work_t.state = 'pending' AND work_t.queue <> $6 AND (work_t.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = work_t.delivery_id AND gate_d.verified)))
          ORDER BY work_t.created_at, work_t.id::text COLLATE "C"
          LIMIT 1)
        UNION ALL
        (SELECT long_t.id, long_t.id::text, long_t.created_at
           FROM todos long_t
          WHERE (md5(long_t.endpoint_id::text) = md5(f.endpoint_id::text) AND md5(long_t.queue) = md5(f.queue::text)
 AND long_t.endpoint_id::text = f.endpoint_id AND long_t.queue = f.queue)
            AND (octet_length(long_t.endpoint_id::text) + octet_length(long_t.queue) > 2000) AND (long_t.state = 'pending' AND long_t.queue <> $6 AND (long_t.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = long_t.delivery_id AND gate_d.verified)))
          ORDER BY long_t.created_at, long_t.id::text COLLATE "C"
          LIMIT 1)) oldest_w
 ORDER BY oldest_w.created_at, oldest_w.id COLLATE "C"
 LIMIT 1) w ON true
      LEFT JOIN LATERAL (SELECT r.ctid, r.nudges, r.last_nudged_at
                           FROM queue_stall_nudges r
                          WHERE (md5(r.endpoint_id) = md5(f.endpoint_id::text) AND md5(r.queue) = md5(f.queue::text)
 AND r.endpoint_id = f.endpoint_id AND r.queue = f.queue)
                          LIMIT 1) r ON true
),
drained AS (
    -- A ledger row whose pair has no work left. Matching its nudges and last_nudged_at
    -- re-checks the row as locked: a row another sweeper charged since this snapshot
    -- (an older build sweeping without the tick lock) stays.
    DELETE FROM queue_stall_nudges n
     WHERE n.ctid = ANY (ARRAY(SELECT j.row_ctid FROM judged j
                                WHERE j.todo_id IS NULL AND j.row_ctid IS NOT NULL))
       AND (n.endpoint_id, n.queue, n.nudges, n.last_nudged_at)
           IN (SELECT j.endpoint_id, j.queue, j.row_nudges, j.last_nudged_at FROM judged j
                WHERE j.todo_id IS NULL)
    RETURNING n.endpoint_id, n.queue
),
assessed AS MATERIALIZED (
    -- Each pair with work: whether it is a candidate now (stalled: work past the
    -- threshold, endpoint active, an enabled hook covering the queue), and, with a ledger
    -- row, its progress: the latest claim after the row's last nudge, logged (commit
    -- order) or by its claimed_at (the host's rows). "fresh": nudge 1 is due at once (no
    -- row, or progress); otherwise the row's count stands, 0 only for a refunded first
    -- nudge.
    SELECT j.endpoint_id, j.queue, j.todo, j.todo_id, j.created_at, j.row_ctid, j.row_nudges,
           j.last_nudged_at, c.candidate, p.progress_at,
           (j.row_ctid IS NULL OR p.progress_at IS NOT NULL) AS fresh,
           CASE WHEN j.row_ctid IS NULL OR p.progress_at IS NOT NULL THEN 0
                ELSE j.row_nudges END AS spent
      FROM judged j
     CROSS JOIN LATERAL (
            SELECT (j.created_at < $1::timestamptz - $2::bigint * interval '1 microsecond')
                   AND EXISTS (SELECT 1 FROM endpoints active_e WHERE active_e.id = j.key AND active_e.state = 'active')
                   AND EXISTS (SELECT 1 FROM notify_hooks receiver_h WHERE (receiver_h.endpoint_id = j.key AND receiver_h.enabled
 AND (receiver_h.queues IS NULL OR j.queue = ANY (receiver_h.queues)))) AS candidate) c
     CROSS JOIN LATERAL (
            SELECT GREATEST((SELECT max(logged_c.claimed_at) FROM stall_nudge.claims logged_c
  WHERE (md5(logged_c.endpoint_id) = md5(j.endpoint_id::text) AND md5(logged_c.queue) = md5(j.queue::text)
 AND logged_c.endpoint_id = j.endpoint_id AND logged_c.queue = j.queue)),
                            CASE WHEN j.row_ctid IS NOT NULL
                                 THEN GREATEST((SELECT claimed_t.claimed_at FROM todos claimed_t
           WHERE claimed_t.endpoint_id = j.key AND claimed_t.queue = j.queue
             AND claimed_t.claimed_at > j.last_nudged_at AND (octet_length(claimed_t.endpoint_id::text) + octet_length(claimed_t.queue) <= 2000)
           ORDER BY claimed_t.claimed_at DESC
           LIMIT 1),
         (SELECT claimed_l.claimed_at FROM todos claimed_l
           WHERE (md5(claimed_l.endpoint_id::text) = md5(j.endpoint_id::text) AND md5(claimed_l.queue) = md5(j.queue::text)
 AND claimed_l.endpoint_id::text = j.endpoint_id AND claimed_l.queue = j.queue)
             AND claimed_l.claimed_at > j.last_nudged_at AND (octet_length(claimed_l.endpoint_id::text) + octet_length(claimed_l.queue) > 2000)
           ORDER BY claimed_l.claimed_at DESC
           LIMIT 1))
                            END) AS progress_at) p
     WHERE j.todo_id IS NOT NULL
),
ranked AS (
    -- Every due pair, ranked in charge order.
    SELECT a.*,
           row_number() OVER (ORDER BY a.spent, a.created_at, a.endpoint_id COLLATE "C", a.queue COLLATE "C") AS rank
      FROM assessed a
     WHERE a.candidate AND (a.fresh OR (a.spent < $4 AND (a.last_nudged_at <= $1::timestamptz - (($3::bigint[])[LEAST(GREATEST(a.spent, 1), cardinality($3::bigint[]))]
 * interval '1 microsecond'))))
),
due AS (
    -- The best tick_limit. The stamp is now, or the latest claim this charge consumes
    -- if later, so the claim is never "after the last nudge" again.
    SELECT r.*, GREATEST($1::timestamptz, r.progress_at) AS stamp
      FROM ranked r
     WHERE r.rank <= $5
),
inserted AS (
    -- A pair with no row in this snapshot gets nudge 1. A row that appeared since (an
    -- older build sweeping without the tick lock, during a deploy) is a conflict:
    -- nothing is charged for the pair this tick.
    INSERT INTO queue_stall_nudges AS n (endpoint_id, queue, nudges, last_nudged_at)
    SELECT d.endpoint_id, d.queue, d.spent + 1, d.stamp
      FROM due d
     WHERE d.row_nudges IS NULL
    ON CONFLICT ((md5(endpoint_id)), (md5(queue))) DO NOTHING
    RETURNING n.endpoint_id, n.queue, n.nudges, n.last_nudged_at
),
advanced AS (
    -- Compare-and-set on the row as locked: it must still be the row this snapshot
    -- decided on (same count and stamp). Behind the tick lock (refunds take it too) it
    -- always is; a row an older build charged or deleted since is left alone.
    UPDATE queue_stall_nudges n
       SET nudges = d.spent + 1, last_nudged_at = d.stamp
      FROM due d
     WHERE n.ctid = ANY (ARRAY(SELECT k.row_ctid FROM due k WHERE k.row_ctid IS NOT NULL))
       AND d.endpoint_id = n.endpoint_id AND d.queue = n.queue
       AND d.row_nudges = n.nudges AND d.last_nudged_at = n.last_nudged_at
    RETURNING n.endpoint_id, n.queue, n.nudges, n.last_nudged_at
),
charged AS (
    SELECT * FROM inserted UNION ALL SELECT * FROM advanced
),
reset AS (
    -- A row with progress this tick does not charge (held back by the tick limit, or no
    -- candidate now) goes: its next nudge is a first one, due at once, as progress makes
    -- it, and its claims need no second look (stall_core.Reset). Compare-and-set as drained.
    DELETE FROM queue_stall_nudges n
     WHERE n.ctid = ANY (ARRAY(SELECT a.row_ctid FROM assessed a
                                WHERE a.row_ctid IS NOT NULL AND a.progress_at IS NOT NULL
                                  AND (a.endpoint_id, a.queue)
                                      NOT IN (SELECT d.endpoint_id, d.queue FROM due d)))
       AND (n.endpoint_id, n.queue, n.nudges, n.last_nudged_at)
           IN (SELECT a.endpoint_id, a.queue, a.row_nudges, a.last_nudged_at FROM assessed a
                WHERE a.progress_at IS NOT NULL)
    RETURNING n.endpoint_id, n.queue
),
absorbed AS (
    -- A logged claim is progress once: consumed with its pair's charge or drain; a
    -- pair with no ledger row starts over anyway; of the others only the latest is ever
    -- read. A claim that commits after this snapshot stays for the next tick. Which
    -- claim is a pair's latest comes from one sort of the log (a plan that spills
    -- rather than degrades once the log is long), not a probe per claim.
    DELETE FROM stall_nudge.claims c
     USING (SELECT k.ctid AS at, row_number() OVER (PARTITION BY k.endpoint_id, k.queue
                   ORDER BY k.claimed_at DESC, k.ctid DESC) AS newest FROM stall_nudge.claims k) k
     WHERE c.ctid = k.at
       AND ((k.newest > 1
 OR NOT EXISTS (SELECT 1 FROM queue_stall_nudges superseded_n
                 WHERE (md5(superseded_n.endpoint_id) = md5(c.endpoint_id::text) AND md5(superseded_n.queue) = md5(c.queue::text)
 AND superseded_n.endpoint_id = c.endpoint_id AND superseded_n.queue = c.queue)))
            OR EXISTS (SELECT 1 FROM charged x
                        WHERE x.endpoint_id = c.endpoint_id AND x.queue = c.queue)
            OR EXISTS (SELECT 1 FROM drained x
                        WHERE x.endpoint_id = c.endpoint_id AND x.queue = c.queue)
            OR EXISTS (SELECT 1 FROM reset x
                        WHERE x.endpoint_id = c.endpoint_id AND x.queue = c.queue))
),
-- The incremental footprint's bookkeeping: due pairs the tick limit held back at nudge 1
-- (no ledger row, or one this tick reset) wait in stall_nudge.held for the next tick's
-- walk in charge order (a held-back pair with a row is found again anyway: its ended
-- backoff stays); the other pairs found leave it; and the changes judged are done with.
-- Reads found, cut and ranked; defines held_back, held, released and looked.
held_back AS (
    SELECT r.endpoint_id, r.queue, r.todo_id, r.created_at
      FROM ranked r
     WHERE r.rank > $5 AND r.fresh
),
held AS (
    -- An entry that already says the same is kept as is.
    INSERT INTO stall_nudge.held AS h (endpoint_id, queue, todo_id, created_at)
    SELECT b.endpoint_id, b.queue, b.todo_id, b.created_at
      FROM held_back b
    ON CONFLICT ((md5(endpoint_id)), (md5(queue)))
    DO UPDATE SET todo_id = EXCLUDED.todo_id, created_at = EXCLUDED.created_at
     WHERE (h.todo_id, h.created_at) IS DISTINCT FROM (EXCLUDED.todo_id, EXCLUDED.created_at)
),
released AS (
    DELETE FROM stall_nudge.held h
     WHERE h.ctid = ANY (ARRAY(
            SELECT k.ctid
              FROM found f
             CROSS JOIN LATERAL (SELECT k.ctid FROM stall_nudge.held k
                                  WHERE (md5(k.endpoint_id) = md5(f.endpoint_id::text) AND md5(k.queue) = md5(f.queue::text)
 AND k.endpoint_id = f.endpoint_id AND k.queue = f.queue)
                                  LIMIT 1) k
             WHERE (f.endpoint_id, f.queue) NOT IN (SELECT b.endpoint_id, b.queue
                                                      FROM held_back b)))
),
looked AS (
    -- Every change past the threshold up to the cut has had its pair judged. Changes
    -- still within the threshold wait for their time, those past the cut for a later tick.
    DELETE FROM stall_nudge.changes x
     WHERE (x.look_after < $1::timestamptz - $2::bigint * interval '1 microsecond')
       AND (x.queue IS NULL
            OR x.look_after <= coalesce((SELECT c.look_after FROM cut c), 'infinity'))
)
-- What the tick did: each charge (with the todo it names; the title is read for these
-- few only) in charge order, then each drained pair. Reads charged, due and drained.
SELECT 'charge' AS kind, c.endpoint_id, c.queue, c.nudges, c.last_nudged_at,
       d.todo_id, d.created_at, t.title, d.rank
  FROM charged c
  JOIN due d ON d.endpoint_id = c.endpoint_id AND d.queue = c.queue
  JOIN todos t ON t.id = d.todo
UNION ALL
SELECT 'drain', x.endpoint_id, x.queue, NULL, NULL, NULL, NULL, NULL, NULL
  FROM drained x
ORDER BY 1, 9

-- statement: tick_changed
-- tick_changed: find_changed + find_backoff_ended + find_held + judge + keep_hints + report
WITH RECURSIVE
-- The usual tick's changes (incremental footprint): the pairs with a logged claim, the
-- pairs of the changes past the threshold up to the cut, and every pair of an endpoint
-- whose state, hooks or deliveries' verification changed. Defines walk, cut and changed.
--
-- Why the cut is enough: a pair change's look_after is at or before the oldest work it
-- can give its pair (the todo's created_at; for a ledger row deleted by hand, the pair's
-- oldest pending todo past the gate then), and a pair with no ledger row and no held
-- entry has all its work behind changes still in the log. So no pair left unjudged ranks
-- ahead of (0 nudges spent, work as old as the first change past the cut). The walk
-- takes the pair changes one instant at a time, oldest first, keeps the pairs due a
-- first nudge with the age of their oldest work, and stops once tick_limit of them rank
-- ahead of every instant left: what the tick charges is then what judging every change
-- would charge. It also stops when the changes or its steps run out; then every change
-- is judged. The first row only names the first instant.
walk (look_after, next, pairs, ages, steps) AS (
    SELECT NULL::timestamptz, g.look_after, '{}'::text[], '{}'::timestamptz[], 0
      FROM (SELECT min(x.look_after) AS look_after FROM stall_nudge.changes x
             WHERE x.queue IS NOT NULL AND (x.look_after < $1::timestamptz - $2::bigint * interval '1 microsecond')) g
     WHERE g.look_after IS NOT NULL
    UNION ALL
    SELECT w.next, n.look_after, w.pairs || j.pairs, w.ages || j.ages, w.steps + 1
      FROM walk w
     CROSS JOIN LATERAL (SELECT min(after_x.look_after) AS look_after FROM stall_nudge.changes after_x
 WHERE after_x.queue IS NOT NULL AND (after_x.look_after < $1::timestamptz - $2::bigint * interval '1 microsecond')
   AND after_x.look_after > w.next) n
     CROSS JOIN LATERAL (SELECT coalesce(array_agg(md5(first_x.endpoint_id) || md5(first_x.queue)), '{}') AS pairs,
       coalesce(array_agg(first_w.created_at), '{}') AS ages
  FROM (SELECT DISTINCT first_c.endpoint_id, first_c.queue FROM stall_nudge.changes first_c
         WHERE first_c.look_after = w.next AND first_c.queue IS NOT NULL) first_x
 CROSS JOIN LATERAL (SELECT (json_populate_record(NULL::endpoints, json_build_object('id', first_x.endpoint_id::text))).id AS key) first_k
 CROSS JOIN LATERAL (SELECT oldest_w.todo, oldest_w.id, oldest_w.created_at
  FROM ((SELECT work_t.id AS todo, work_t.id::text AS id, work_t.created_at
           FROM todos work_t
          WHERE work_t.endpoint_id = first_k.key AND work_t.queue = first_x.queue
            AND (octet_length(work_t.endpoint_id::text) + octet_length(work_t.queue) <= 2000) AND (work_t.state = 'pending' AND work_t.queue <> $6 AND (work_t.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = work_t.delivery_id AND gate_d.verified)))
          ORDER BY work_t.created_at, work_t.id::text COLLATE "C"
          LIMIT 1)
        UNION ALL
        (SELECT long_t.id, long_t.id::text, long_t.created_at
           FROM todos long_t
          WHERE (md5(long_t.endpoint_id::text) = md5(first_x.endpoint_id::text) AND md5(long_t.queue) = md5(first_x.queue::text)
 AND long_t.endpoint_id::text = first_x.endpoint_id AND long_t.queue = first_x.queue)
            AND (octet_length(long_t.endpoint_id::text) + octet_length(long_t.queue) > 2000) AND (long_t.state = 'pending' AND long_t.queue <> $6 AND (long_t.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = long_t.delivery_id AND gate_d.verified)))
          ORDER BY long_t.created_at, long_t.id::text COLLATE "C"
          LIMIT 1)) oldest_w
 ORDER BY oldest_w.created_at, oldest_w.id COLLATE "C"
 LIMIT 1) first_w
 WHERE (first_w.created_at < $1::timestamptz - $2::bigint * interval '1 microsecond')
   AND NOT EXISTS (SELECT 1 FROM queue_stall_nudges first_r
                    WHERE (md5(first_r.endpoint_id) = md5(first_x.endpoint_id::text) AND md5(first_r.queue) = md5(first_x.queue::text)
 AND first_r.endpoint_id = first_x.endpoint_id AND first_r.queue = first_x.queue))
   AND EXISTS (SELECT 1 FROM endpoints active_e WHERE active_e.id = first_k.key AND active_e.state = 'active')
   AND EXISTS (SELECT 1 FROM notify_hooks receiver_h WHERE (receiver_h.endpoint_id = first_k.key AND receiver_h.enabled
 AND (receiver_h.queues IS NULL OR first_x.queue = ANY (receiver_h.queues))))) j
     WHERE w.next IS NOT NULL AND w.steps < (64 + 4 * $5)
       AND NOT ((SELECT count(DISTINCT filled_u.pair) FROM unnest(w.pairs, w.ages) AS filled_u (pair, age)
   WHERE filled_u.age < w.next) >= $5)
),
cut AS (
    -- The last instant judged, if the walk filled the tick limit; otherwise no cut.
    SELECT s.look_after
      FROM (SELECT w.look_after, ((SELECT count(DISTINCT filled_u.pair) FROM unnest(w.pairs, w.ages) AS filled_u (pair, age)
   WHERE filled_u.age < w.next) >= $5) AS filled
              FROM walk w
             ORDER BY w.steps DESC
             LIMIT 1) s
     WHERE s.filled
),
reconfigured AS (
    -- Endpoints whose state, hooks or deliveries' verification changed.
    SELECT DISTINCT x.endpoint_id, (json_populate_record(NULL::endpoints, json_build_object('id', x.endpoint_id::text))).id AS key
      FROM stall_nudge.changes x
     WHERE x.queue IS NULL AND (x.look_after < $1::timestamptz - $2::bigint * interval '1 microsecond')
),
changed AS (
    SELECT c.endpoint_id, c.queue FROM stall_nudge.claims c
    UNION
    SELECT x.endpoint_id, x.queue FROM stall_nudge.changes x
     WHERE x.queue IS NOT NULL AND (x.look_after < $1::timestamptz - $2::bigint * interval '1 microsecond')
       AND x.look_after <= coalesce((SELECT c.look_after FROM cut c), 'infinity')
    UNION
    -- Every pair of a reconfigured endpoint: its pending todos' queues (on both sides
    -- of the pending index) and its ledger rows.
    SELECT e.endpoint_id, q.queue
      FROM reconfigured e
     CROSS JOIN LATERAL (SELECT DISTINCT t.queue FROM todos t
                          WHERE t.endpoint_id = e.key AND t.state = 'pending'
                            AND (octet_length(t.endpoint_id::text) + octet_length(t.queue) <= 2000)) q
    UNION
    SELECT e.endpoint_id, q.queue
      FROM reconfigured e
     CROSS JOIN LATERAL (SELECT DISTINCT t.queue FROM todos t
                          WHERE md5(t.endpoint_id::text) = md5(e.endpoint_id)
                            AND t.endpoint_id::text = e.endpoint_id AND t.state = 'pending'
                            AND (octet_length(t.endpoint_id::text) + octet_length(t.queue) > 2000)) q
    UNION
    SELECT e.endpoint_id, n.queue
      FROM reconfigured e
     CROSS JOIN LATERAL (SELECT DISTINCT n.queue FROM queue_stall_nudges n
                          WHERE md5(n.endpoint_id) = md5(e.endpoint_id)
                            AND n.endpoint_id = e.endpoint_id) n
),
-- The ledger rows whose backoff ended: one range scan of stall_nudge_ledger_due per
-- count below the cap (OFFSET 0 keeps each a range scan, never a scan of the ledger).
-- Defines backoff_ended.
backoff_ended AS (
    SELECT r.endpoint_id, r.queue
      FROM generate_series(0, $4 - 1) AS s (nudges)
     CROSS JOIN LATERAL (SELECT r.endpoint_id, r.queue FROM queue_stall_nudges r
                          WHERE r.nudges = s.nudges
                            AND (r.last_nudged_at <= $1::timestamptz - (($3::bigint[])[LEAST(GREATEST(s.nudges, 1), cardinality($3::bigint[]))]
 * interval '1 microsecond'))
                         OFFSET 0) r
),
-- The usual tick's pairs: what changed, the rows whose backoff ended, and the best
-- tick_limit held-back pairs. Reads changed and backoff_ended; defines found. A held
-- pair changes only through what those two list (a claim, a change, a backoff), so the
-- rest keep their order: the best tick_limit of them are all a tick can charge.
found AS (
    SELECT c.endpoint_id, c.queue FROM changed c
    UNION
    SELECT b.endpoint_id, b.queue FROM backoff_ended b
    UNION
    (SELECT h.endpoint_id, h.queue
       FROM stall_nudge.held h
      WHERE (h.endpoint_id, h.queue) NOT IN (SELECT c.endpoint_id, c.queue FROM changed c)
        AND (h.endpoint_id, h.queue) NOT IN (SELECT b.endpoint_id, b.queue FROM backoff_ended b)
      ORDER BY h.created_at, h.endpoint_id COLLATE "C", h.queue COLLATE "C"
      LIMIT $5)
),
-- Judge each pair found on the current rows, by the core's rules, and act on it: charge
-- the best tick_limit due pairs, delete the rows of pairs left with no work and of pairs
-- with progress it does not charge, and consume the logged claims. Reads found; defines
-- judged, drained, assessed, ranked, due, inserted, advanced, charged, reset and absorbed. Rows are written by ctid (a TID scan), each
-- compare-and-set on its columns as locked: the due predicate re-checked at lock time.
judged AS MATERIALIZED (
    -- Each pair with its oldest work and its ledger row, either possibly absent. Every
    -- lookup is one index descent per pair (LIMIT 1 keeps each a nested loop).
    SELECT f.endpoint_id, f.queue, k.key, w.todo, w.id AS todo_id, w.created_at,
           r.ctid AS row_ctid, r.nudges AS row_nudges, r.last_nudged_at
      FROM found f
     CROSS JOIN LATERAL (SELECT (json_populate_record(NULL::endpoints, json_build_object('id', f.endpoint_id::text))).id AS key) k
      LEFT JOIN LATERAL (SELECT oldest_w.todo, oldest_w.id, oldest_w.created_at
  FROM ((SELECT work_t.id AS todo, work_t.id::text AS id, work_t.created_at
           FROM todos work_t
          WHERE work_t.endpoint_id = k.key AND work_t.queue = f.queue
            AND (octet_length(work_t.endpoint_id::text) + octet_length(work_t.queue) <= 2000) AND (work_t.state = 'pending' AND work_t.queue <> $6 AND (work_t.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = work_t.delivery_id AND gate_d.verified)))
          ORDER BY work_t.created_at, work_t.id::text COLLATE "C"
          LIMIT 1)
        UNION ALL
        (SELECT long_t.id, long_t.id::text, long_t.created_at
           FROM todos long_t
          WHERE (md5(long_t.endpoint_id::text) = md5(f.endpoint_id::text) AND md5(long_t.queue) = md5(f.queue::text)
 AND long_t.endpoint_id::text = f.endpoint_id AND long_t.queue = f.queue)
            AND (octet_length(long_t.endpoint_id::text) + octet_length(long_t.queue) > 2000) AND (long_t.state = 'pending' AND long_t.queue <> $6 AND (long_t.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = long_t.delivery_id AND gate_d.verified)))
          ORDER BY long_t.created_at, long_t.id::text COLLATE "C"
          LIMIT 1)) oldest_w
 ORDER BY oldest_w.created_at, oldest_w.id COLLATE "C"
 LIMIT 1) w ON true
      LEFT JOIN LATERAL (SELECT r.ctid, r.nudges, r.last_nudged_at
                           FROM queue_stall_nudges r
                          WHERE (md5(r.endpoint_id) = md5(f.endpoint_id::text) AND md5(r.queue) = md5(f.queue::text)
 AND r.endpoint_id = f.endpoint_id AND r.queue = f.queue)
                          LIMIT 1) r ON true
),
drained AS (
    -- A ledger row whose pair has no work left. Matching its nudges and last_nudged_at
    -- re-checks the row as locked: a row another sweeper charged since this snapshot
    -- (an older build sweeping without the tick lock) stays.
    DELETE FROM queue_stall_nudges n
     WHERE n.ctid = ANY (ARRAY(SELECT j.row_ctid FROM judged j
                                WHERE j.todo_id IS NULL AND j.row_ctid IS NOT NULL))
       AND (n.endpoint_id, n.queue, n.nudges, n.last_nudged_at)
           IN (SELECT j.endpoint_id, j.queue, j.row_nudges, j.last_nudged_at FROM judged j
                WHERE j.todo_id IS NULL)
    RETURNING n.endpoint_id, n.queue
),
assessed AS MATERIALIZED (
    -- Each pair with work: whether it is a candidate now (stalled: work past the
    -- threshold, endpoint active, an enabled hook covering the queue), and, with a ledger
    -- row, its progress: the latest claim after the row's last nudge, logged (commit
    -- order) or by its claimed_at (the host's rows). "fresh": nudge 1 is due at once (no
    -- row, or progress); otherwise the row's count stands, 0 only for a refunded first
    -- nudge.
    SELECT j.endpoint_id, j.queue, j.todo, j.todo_id, j.created_at, j.row_ctid, j.row_nudges,
           j.last_nudged_at, c.candidate, p.progress_at,
           (j.row_ctid IS NULL OR p.progress_at IS NOT NULL) AS fresh,
           CASE WHEN j.row_ctid IS NULL OR p.progress_at IS NOT NULL THEN 0
                ELSE j.row_nudges END AS spent
      FROM judged j
     CROSS JOIN LATERAL (
            SELECT (j.created_at < $1::timestamptz - $2::bigint * interval '1 microsecond')
                   AND EXISTS (SELECT 1 FROM endpoints active_e WHERE active_e.id = j.key AND active_e.state = 'active')
                   AND EXISTS (SELECT 1 FROM notify_hooks receiver_h WHERE (receiver_h.endpoint_id = j.key AND receiver_h.enabled
 AND (receiver_h.queues IS NULL OR j.queue = ANY (receiver_h.queues)))) AS candidate) c
     CROSS JOIN LATERAL (
            SELECT GREATEST((SELECT max(logged_c.claimed_at) FROM stall_nudge.claims logged_c
  WHERE (md5(logged_c.endpoint_id) = md5(j.endpoint_id::text) AND md5(logged_c.queue) = md5(j.queue::text)
 AND logged_c.endpoint_id = j.endpoint_id AND logged_c.queue = j.queue)),
                            CASE WHEN j.row_ctid IS NOT NULL
                                 THEN GREATEST((SELECT claimed_t.claimed_at FROM todos claimed_t
           WHERE claimed_t.endpoint_id = j.key AND claimed_t.queue = j.queue
             AND claimed_t.claimed_at > j.last_nudged_at AND (octet_length(claimed_t.endpoint_id::text) + octet_length(claimed_t.queue) <= 2000)
           ORDER BY claimed_t.claimed_at DESC
           LIMIT 1),
         (SELECT claimed_l.claimed_at FROM todos claimed_l
           WHERE (md5(claimed_l.endpoint_id::text) = md5(j.endpoint_id::text) AND md5(claimed_l.queue) = md5(j.queue::text)
 AND claimed_l.endpoint_id::text = j.endpoint_id AND claimed_l.queue = j.queue)
             AND claimed_l.claimed_at > j.last_nudged_at AND (octet_length(claimed_l.endpoint_id::text) + octet_length(claimed_l.queue) > 2000)
           ORDER BY claimed_l.claimed_at DESC
           LIMIT 1))
                            END) AS progress_at) p
     WHERE j.todo_id IS NOT NULL
),
ranked AS (
    -- Every due pair, ranked in charge order.
    SELECT a.*,
           row_number() OVER (ORDER BY a.spent, a.created_at, a.endpoint_id COLLATE "C", a.queue COLLATE "C") AS rank
      FROM assessed a
     WHERE a.candidate AND (a.fresh OR (a.spent < $4 AND (a.last_nudged_at <= $1::timestamptz - (($3::bigint[])[LEAST(GREATEST(a.spent, 1), cardinality($3::bigint[]))]
 * interval '1 microsecond'))))
),
due AS (
    -- The best tick_limit. The stamp is now, or the latest claim this charge consumes
    -- if later, so the claim is never "after the last nudge" again.
    SELECT r.*, GREATEST($1::timestamptz, r.progress_at) AS stamp
      FROM ranked r
     WHERE r.rank <= $5
),
inserted AS (
    -- A pair with no row in this snapshot gets nudge 1. A row that appeared since (an
    -- older build sweeping without the tick lock, during a deploy) is a conflict:
    -- nothing is charged for the pair this tick.
    INSERT INTO queue_stall_nudges AS n (endpoint_id, queue, nudges, last_nudged_at)
    SELECT d.endpoint_id, d.queue, d.spent + 1, d.stamp
      FROM due d
     WHERE d.row_nudges IS NULL
    ON CONFLICT ((md5(endpoint_id)), (md5(queue))) DO NOTHING
    RETURNING n.endpoint_id, n.queue, n.nudges, n.last_nudged_at
),
advanced AS (
    -- Compare-and-set on the row as locked: it must still be the row this snapshot
    -- decided on (same count and stamp). Behind the tick lock (refunds take it too) it
    -- always is; a row an older build charged or deleted since is left alone.
    UPDATE queue_stall_nudges n
       SET nudges = d.spent + 1, last_nudged_at = d.stamp
      FROM due d
     WHERE n.ctid = ANY (ARRAY(SELECT k.row_ctid FROM due k WHERE k.row_ctid IS NOT NULL))
       AND d.endpoint_id = n.endpoint_id AND d.queue = n.queue
       AND d.row_nudges = n.nudges AND d.last_nudged_at = n.last_nudged_at
    RETURNING n.endpoint_id, n.queue, n.nudges, n.last_nudged_at
),
charged AS (
    SELECT * FROM inserted UNION ALL SELECT * FROM advanced
),
reset AS (
    -- A row with progress this tick does not charge (held back by the tick limit, or no
    -- candidate now) goes: its next nudge is a first one, due at once, as progress makes
    -- it, and its claims need no second look (stall_core.Reset). Compare-and-set as drained.
    DELETE FROM queue_stall_nudges n
     WHERE n.ctid = ANY (ARRAY(SELECT a.row_ctid FROM assessed a
                                WHERE a.row_ctid IS NOT NULL AND a.progress_at IS NOT NULL
                                  AND (a.endpoint_id, a.queue)
                                      NOT IN (SELECT d.endpoint_id, d.queue FROM due d)))
       AND (n.endpoint_id, n.queue, n.nudges, n.last_nudged_at)
           IN (SELECT a.endpoint_id, a.queue, a.row_nudges, a.last_nudged_at FROM assessed a
                WHERE a.progress_at IS NOT NULL)
    RETURNING n.endpoint_id, n.queue
),
absorbed AS (
    -- A logged claim is progress once: consumed with its pair's charge or drain; a
    -- pair with no ledger row starts over anyway; of the others only the latest is ever
    -- read. A claim that commits after this snapshot stays for the next tick. Which
    -- claim is a pair's latest comes from one sort of the log (a plan that spills
    -- rather than degrades once the log is long), not a probe per claim.
    DELETE FROM stall_nudge.claims c
     USING (SELECT k.ctid AS at, row_number() OVER (PARTITION BY k.endpoint_id, k.queue
                   ORDER BY k.claimed_at DESC, k.ctid DESC) AS newest FROM stall_nudge.claims k) k
     WHERE c.ctid = k.at
       AND ((k.newest > 1
 OR NOT EXISTS (SELECT 1 FROM queue_stall_nudges superseded_n
                 WHERE (md5(superseded_n.endpoint_id) = md5(c.endpoint_id::text) AND md5(superseded_n.queue) = md5(c.queue::text)
 AND superseded_n.endpoint_id = c.endpoint_id AND superseded_n.queue = c.queue)))
            OR EXISTS (SELECT 1 FROM charged x
                        WHERE x.endpoint_id = c.endpoint_id AND x.queue = c.queue)
            OR EXISTS (SELECT 1 FROM drained x
                        WHERE x.endpoint_id = c.endpoint_id AND x.queue = c.queue)
            OR EXISTS (SELECT 1 FROM reset x
                        WHERE x.endpoint_id = c.endpoint_id AND x.queue = c.queue))
),
-- The incremental footprint's bookkeeping: due pairs the tick limit held back at nudge 1
-- (no ledger row, or one this tick reset) wait in stall_nudge.held for the next tick's
-- walk in charge order (a held-back pair with a row is found again anyway: its ended
-- backoff stays); the other pairs found leave it; and the changes judged are done with.
-- Reads found, cut and ranked; defines held_back, held, released and looked.
held_back AS (
    SELECT r.endpoint_id, r.queue, r.todo_id, r.created_at
      FROM ranked r
     WHERE r.rank > $5 AND r.fresh
),
held AS (
    -- An entry that already says the same is kept as is.
    INSERT INTO stall_nudge.held AS h (endpoint_id, queue, todo_id, created_at)
    SELECT b.endpoint_id, b.queue, b.todo_id, b.created_at
      FROM held_back b
    ON CONFLICT ((md5(endpoint_id)), (md5(queue)))
    DO UPDATE SET todo_id = EXCLUDED.todo_id, created_at = EXCLUDED.created_at
     WHERE (h.todo_id, h.created_at) IS DISTINCT FROM (EXCLUDED.todo_id, EXCLUDED.created_at)
),
released AS (
    DELETE FROM stall_nudge.held h
     WHERE h.ctid = ANY (ARRAY(
            SELECT k.ctid
              FROM found f
             CROSS JOIN LATERAL (SELECT k.ctid FROM stall_nudge.held k
                                  WHERE (md5(k.endpoint_id) = md5(f.endpoint_id::text) AND md5(k.queue) = md5(f.queue::text)
 AND k.endpoint_id = f.endpoint_id AND k.queue = f.queue)
                                  LIMIT 1) k
             WHERE (f.endpoint_id, f.queue) NOT IN (SELECT b.endpoint_id, b.queue
                                                      FROM held_back b)))
),
looked AS (
    -- Every change past the threshold up to the cut has had its pair judged. Changes
    -- still within the threshold wait for their time, those past the cut for a later tick.
    DELETE FROM stall_nudge.changes x
     WHERE (x.look_after < $1::timestamptz - $2::bigint * interval '1 microsecond')
       AND (x.queue IS NULL
            OR x.look_after <= coalesce((SELECT c.look_after FROM cut c), 'infinity'))
)
-- What the tick did: each charge (with the todo it names; the title is read for these
-- few only) in charge order, then each drained pair. Reads charged, due and drained.
SELECT 'charge' AS kind, c.endpoint_id, c.queue, c.nudges, c.last_nudged_at,
       d.todo_id, d.created_at, t.title, d.rank
  FROM charged c
  JOIN due d ON d.endpoint_id = c.endpoint_id AND d.queue = c.queue
  JOIN todos t ON t.id = d.todo
UNION ALL
SELECT 'drain', x.endpoint_id, x.queue, NULL, NULL, NULL, NULL, NULL, NULL
  FROM drained x
ORDER BY 1, 9

-- statement: pair_status
-- pair_status: find_every_pair + count_pending + status
WITH RECURSIVE
-- The full pass: every pair with a pending todo, with a ledger row, or held back.
-- Defines found and cut (none: a full pass judges every change). Cost follows pairs,
-- not todos: one descent of the pending index per pair with pending work (a skip
-- scan: each step asks for the first entry past the pair before).
pending_pairs AS (
    (SELECT t.endpoint_id, t.queue FROM todos t
      WHERE t.state = 'pending' AND (octet_length(t.endpoint_id::text) + octet_length(t.queue) <= 2000)
      ORDER BY t.endpoint_id, t.queue
      LIMIT 1)
    UNION ALL
    SELECT n.endpoint_id, n.queue
      FROM pending_pairs p
     CROSS JOIN LATERAL (SELECT t.endpoint_id, t.queue FROM todos t
                          WHERE t.state = 'pending' AND (octet_length(t.endpoint_id::text) + octet_length(t.queue) <= 2000)
                            AND (t.endpoint_id, t.queue) > (p.endpoint_id, p.queue)
                          ORDER BY t.endpoint_id, t.queue
                          LIMIT 1) n
),
found AS (
    SELECT p.endpoint_id::text AS endpoint_id, p.queue FROM pending_pairs p
    UNION
    -- Pairs whose names are too long for the pending index: rare, their own index.
    SELECT t.endpoint_id::text, t.queue FROM todos t
     WHERE t.state = 'pending' AND (octet_length(t.endpoint_id::text) + octet_length(t.queue) > 2000)
    UNION
    SELECT r.endpoint_id, r.queue FROM queue_stall_nudges r
    UNION
    SELECT h.endpoint_id, h.queue FROM stall_nudge.held h
),
cut AS (
    SELECT NULL::timestamptz AS look_after WHERE false
),
-- Pending todos per pair, past the gate and held back by it: one pass over them.
-- Defines counts.
counts AS (
    SELECT p.endpoint_id::text AS endpoint_id, p.queue,
           count(*) FILTER (WHERE (p.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = p.delivery_id AND gate_d.verified))) AS gated,
           count(*) FILTER (WHERE NOT (p.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = p.delivery_id AND gate_d.verified))) AS ungated
      FROM todos p
     WHERE p.state = 'pending'
     GROUP BY p.endpoint_id, p.queue
)
-- "Is my queue drained?": each pair found with the facts its verdict needs, read by
-- the judging part's rules (stall_core.pair_status turns them into the verdict), and
-- its covering hooks' health. Reads found and counts. $1 is the quarantine queue's name.
SELECT f.endpoint_id, f.queue, coalesce(n.gated, 0) AS gated, coalesce(n.ungated, 0) AS ungated,
       w.id AS todo_id, w.created_at, t.title,
       EXISTS (SELECT 1 FROM endpoints active_e WHERE active_e.id = k.key AND active_e.state = 'active') AS endpoint_active,
       EXISTS (SELECT 1 FROM notify_hooks receiver_h WHERE (receiver_h.endpoint_id = k.key AND receiver_h.enabled
 AND (receiver_h.queues IS NULL OR f.queue = ANY (receiver_h.queues)))) AS has_receiver,
       GREATEST((SELECT max(logged_c.claimed_at) FROM stall_nudge.claims logged_c
  WHERE (md5(logged_c.endpoint_id) = md5(f.endpoint_id::text) AND md5(logged_c.queue) = md5(f.queue::text)
 AND logged_c.endpoint_id = f.endpoint_id AND logged_c.queue = f.queue)),
                CASE WHEN r.nudges IS NOT NULL
                     THEN GREATEST((SELECT claimed_t.claimed_at FROM todos claimed_t
           WHERE claimed_t.endpoint_id = k.key AND claimed_t.queue = f.queue
             AND claimed_t.claimed_at > r.last_nudged_at AND (octet_length(claimed_t.endpoint_id::text) + octet_length(claimed_t.queue) <= 2000)
           ORDER BY claimed_t.claimed_at DESC
           LIMIT 1),
         (SELECT claimed_l.claimed_at FROM todos claimed_l
           WHERE (md5(claimed_l.endpoint_id::text) = md5(f.endpoint_id::text) AND md5(claimed_l.queue) = md5(f.queue::text)
 AND claimed_l.endpoint_id::text = f.endpoint_id AND claimed_l.queue = f.queue)
             AND claimed_l.claimed_at > r.last_nudged_at AND (octet_length(claimed_l.endpoint_id::text) + octet_length(claimed_l.queue) > 2000)
           ORDER BY claimed_l.claimed_at DESC
           LIMIT 1))
                END) AS progress_at,
       r.nudges, r.last_nudged_at, h.hook_failures, h.hooks_disabled
  FROM found f
 CROSS JOIN LATERAL (SELECT (json_populate_record(NULL::endpoints, json_build_object('id', f.endpoint_id::text))).id AS key) k
  LEFT JOIN counts n ON n.endpoint_id = f.endpoint_id AND n.queue = f.queue
  LEFT JOIN LATERAL (SELECT oldest_w.todo, oldest_w.id, oldest_w.created_at
  FROM ((SELECT work_t.id AS todo, work_t.id::text AS id, work_t.created_at
           FROM todos work_t
          WHERE work_t.endpoint_id = k.key AND work_t.queue = f.queue
            AND (octet_length(work_t.endpoint_id::text) + octet_length(work_t.queue) <= 2000) AND (work_t.state = 'pending' AND work_t.queue <> $1 AND (work_t.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = work_t.delivery_id AND gate_d.verified)))
          ORDER BY work_t.created_at, work_t.id::text COLLATE "C"
          LIMIT 1)
        UNION ALL
        (SELECT long_t.id, long_t.id::text, long_t.created_at
           FROM todos long_t
          WHERE (md5(long_t.endpoint_id::text) = md5(f.endpoint_id::text) AND md5(long_t.queue) = md5(f.queue::text)
 AND long_t.endpoint_id::text = f.endpoint_id AND long_t.queue = f.queue)
            AND (octet_length(long_t.endpoint_id::text) + octet_length(long_t.queue) > 2000) AND (long_t.state = 'pending' AND long_t.queue <> $1 AND (long_t.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = long_t.delivery_id AND gate_d.verified)))
          ORDER BY long_t.created_at, long_t.id::text COLLATE "C"
          LIMIT 1)) oldest_w
 ORDER BY oldest_w.created_at, oldest_w.id COLLATE "C"
 LIMIT 1) w ON true
  LEFT JOIN todos t ON t.id = w.todo
  LEFT JOIN queue_stall_nudges r ON (md5(r.endpoint_id) = md5(f.endpoint_id::text) AND md5(r.queue) = md5(f.queue::text)
 AND r.endpoint_id = f.endpoint_id AND r.queue = f.queue)
 CROSS JOIN LATERAL (
        -- The most consecutive failures of an enabled covering hook, and how many
        -- covering hooks are disabled.
        SELECT coalesce(max(c.consecutive_failures) FILTER (WHERE c.enabled), 0) AS hook_failures,
               count(*) FILTER (WHERE NOT c.enabled) AS hooks_disabled
          FROM notify_hooks c
         WHERE c.endpoint_id = k.key AND (c.queues IS NULL OR f.queue = ANY (c.queues))) h
 ORDER BY f.endpoint_id COLLATE "C", f.queue COLLATE "C"

