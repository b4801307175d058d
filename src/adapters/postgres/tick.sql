-- A tick's statements, in the order a tick sends them. Each runs in a guest's transaction:
-- tick_lock sets its search_path to pg_catalog, stall_nudge, pg_temp. host_todos,
-- host_deliveries, host_endpoints and host_notify_hooks are the views migrate made in our
-- schema of exactly the host's columns we read, so nothing another role creates is ever
-- resolved.
-- Parameters of find_changed and judge: $1 now, $2 threshold (µs), $3 backoff (µs[]), $4
-- cap, $5 tick limit, $6 the quarantine queue; each adds its own after them. Durations come
-- as microseconds, so no interval carries a days field (PostgreSQL would add those as
-- calendar days in the session time zone). Where a statement restates a rule of the core it
-- names the function ("stall_core.work_of"); tests/postgres/test_rules_differential.py
-- holds each restatement to its function on random rows.

-- name: tick_lock
-- Make this transaction a guest's, take the fleet's tick lock (or learn another instance holds it), and read the time and when the fleet last ticked.
-- $1 the lock's key, $2 statement and lock timeout (ms, as text). Every setting is local to
-- the transaction; JIT is off (compiling a statement of a few index probes costs far more
-- than running it); work_mem is 64 MB, so a full pass's hashes and sorts of every pair stay
-- in memory. The lock is transaction-level, so it works behind a transaction-pooling
-- PgBouncer. Names are qualified: the caller's search_path holds while this is parsed. The
-- record read here predates the lock: enough for an instance that did not get it.
SELECT l.got, pg_catalog.clock_timestamp() AS now, t.swept_at
  FROM (SELECT pg_catalog.set_config('search_path', 'pg_catalog, stall_nudge, pg_temp', true),
               pg_catalog.set_config('statement_timeout', $2, true),
               pg_catalog.set_config('lock_timeout', $2, true),
               pg_catalog.set_config('jit', 'off', true),
               pg_catalog.set_config('work_mem', '64MB', true),
               pg_catalog.pg_try_advisory_xact_lock($1) AS got
        OFFSET 0) l
  LEFT JOIN stall_nudge.ticks t ON true;

-- name: tick_record
-- With the tick lock held: the time and the fleet's record, in a snapshot taken after the lock.
-- The tick before this one committed before the lock was free, so it is seen here: a
-- tick's "now" is never earlier than that commit, and the fleet never sweeps twice within
-- an interval. host_schema is NULL until migrate recorded it. silence_ends is the first end
-- of a silence after the watermark: once it has passed, the tick is a full pass, so every
-- pair the silence covered is judged again.
SELECT clock_timestamp() AS now, t.swept_at, t.judged_to, t.full_pass_at, t.full_pass_pairs,
       t.claims_read_ids, t.claims_read_at, s.host_schema,
       (SELECT min(e.ends_at) FROM silences e WHERE e.ends_at > t.judged_to) AS silence_ends
  FROM (SELECT 1) one
  LEFT JOIN ticks t ON true
  LEFT JOIN settings s ON true;

-- name: find_changed
-- The delta: the pairs whose decision can have changed since the last judging tick, as two arrays, whether a read of the host's rows stopped at its bound, and the claims it read.
-- $7 the claims window (stall_core.claims_window: that tick's now less the lookback, which
-- covers transactions still open then), $8 the last full pass's now less the lookback, $9
-- the bound on each read of the host's rows (a change set that large is cheaper judged by a
-- full pass), $10 and $11 the claims the last tick read (todo ids, stamps). What no
-- timestamp shows (a delete, a change of endpoint, hook or verification, a row written with
-- an old stamp) waits for the full pass. Sent before judge, planned for its own values.
WITH reads AS MATERIALIZED (
    -- The claims a tick reads (stall_core.claims_read): one range scan of the activity index.
    SELECT c.endpoint_id::text AS endpoint_id, c.queue, c.id::text AS id, c.claimed_at
      FROM host_todos c
     WHERE coalesce(c.claimed_at, c.created_at) > $7 AND c.claimed_at < '9999-12-31 23:59:59.999999+00'
       AND c.state <> 'pending'
),
claimed AS (
    -- The new ones (stall_core.latest_claim: not read by the last tick) that are progress for
    -- a ledger row (stall_core.made_progress).
    SELECT w.endpoint_id, w.queue FROM reads w
      JOIN queue_stall_nudges r ON r.endpoint_id = w.endpoint_id AND r.queue = w.queue
     WHERE r.progressed_at IS NULL
       AND (w.id, w.claimed_at) NOT IN (SELECT * FROM unnest($10::text[], $11::timestamptz[]))
     LIMIT $9
),
requeued AS (
    -- Todos given back since the last full pass: work again. A host that clears
    -- claimed_at when it requeues waits for the full pass.
    SELECT q.endpoint_id, q.queue FROM host_todos q
     WHERE q.state = 'pending' AND q.claimed_at > $8
       AND q.claimed_at < '9999-12-31 23:59:59.999999+00'
     LIMIT $9
),
arrived AS (
    -- Pending todos never claimed that crossed the threshold since the watermark
    -- (stall_core.is_candidate): a range of the activity index, whose key is their
    -- created_at. One requeued crosses it as a requeue (above), or waits for a full pass.
    SELECT a.endpoint_id, a.queue FROM host_todos a
     WHERE a.state = 'pending' AND a.queue <> $6 AND a.claimed_at IS NULL
       AND coalesce(a.claimed_at, a.created_at) >= $7::timestamptz - $2::bigint * interval '1 microsecond'
       AND coalesce(a.claimed_at, a.created_at) < $1::timestamptz - $2::bigint * interval '1 microsecond'
     LIMIT $9
),
changed AS (
    SELECT c.endpoint_id, c.queue FROM claimed c
    UNION
    SELECT q.endpoint_id::text, q.queue FROM requeued q
    UNION
    -- A crossing matters to a pair with no row, or with progress kept; the others wait on
    -- their backoff, and the pairs held back are found below.
    SELECT a.endpoint_id::text, a.queue FROM arrived a
     WHERE NOT EXISTS (SELECT 1 FROM queue_stall_nudges r
                        WHERE r.endpoint_id = a.endpoint_id::text AND r.queue = a.queue
                          AND r.progressed_at IS NULL)
       AND NOT EXISTS (SELECT 1 FROM held h
                        WHERE h.endpoint_id = a.endpoint_id::text AND h.queue = a.queue)
    UNION
    -- Rows below the cap whose backoff step ended since the watermark
    -- (stall_core.next_due_at): a range scan of stall_nudge_ledger_due per count.
    SELECT r.endpoint_id, r.queue
      FROM generate_series(0, $4 - 1) AS s (nudges)
     CROSS JOIN LATERAL (
            SELECT interval '1 microsecond'
                   * ($3::bigint[])[LEAST(GREATEST(s.nudges, 1), cardinality($3::bigint[]))]
                   AS step) b
     CROSS JOIN LATERAL (SELECT r.endpoint_id, r.queue FROM queue_stall_nudges r
                          WHERE r.nudges = s.nudges
                            AND r.last_nudged_at > $7::timestamptz - b.step
                            AND r.last_nudged_at <= $1::timestamptz - b.step
                         OFFSET 0) r
    UNION
    -- Rows nudged since the last full pass whose named todo is no longer pending in the
    -- pair (stall_core.has_departed): a consumer claims soon after its wake.
    SELECT r.endpoint_id, r.queue
      FROM generate_series(0, $4) AS s (nudges)
     CROSS JOIN LATERAL (SELECT r.endpoint_id, r.queue, r.named_todo FROM queue_stall_nudges r
                          WHERE r.nudges = s.nudges AND r.last_nudged_at >= $8
                            AND r.progressed_at IS NULL AND r.named_todo IS NOT NULL
                         OFFSET 0) r
     WHERE NOT EXISTS (
            SELECT 1 FROM host_todos n
             WHERE n.id = (json_populate_record(NULL::host_todos,
                                                json_build_object('id', r.named_todo))).id
               AND n.state = 'pending' AND n.endpoint_id::text = r.endpoint_id
               AND n.queue = r.queue)
    UNION
    -- The pairs the tick limit held back, best first (stall_core.charge_order): only the
    -- first tick_limit can be charged now.
    (SELECT h.endpoint_id, h.queue FROM held h
      ORDER BY h.spent, h.created_at, h.endpoint_id COLLATE "C", h.queue COLLATE "C"
      LIMIT $5)
)
SELECT coalesce(array_agg(c.endpoint_id), '{}') AS endpoint_ids,
       coalesce(array_agg(c.queue), '{}') AS queues,
       (SELECT count(*) FROM claimed) >= $9 OR (SELECT count(*) FROM requeued) >= $9
       OR (SELECT count(*) FROM arrived) >= $9 AS overflow,
       (SELECT coalesce(array_agg(w.id), '{}') FROM reads w) AS read_ids,
       (SELECT coalesce(array_agg(w.claimed_at), '{}') FROM reads w) AS read_at
  FROM changed c;

-- name: judge
-- Judge pairs: charge, clear, reset, hold back.
-- Of the pairs due it charges the best tick_limit and holds the others for the next tick; it
-- clears the rows of pairs left with no work and resets rows whose progress no charge answers.
-- $7 and $8 name the pairs a delta found (endpoint ids, queues); NULL for a full pass, which
-- finds here, in the same snapshot, every pair with a pending todo, a ledger row or a held
-- entry; each is planned for its values (a delta's few pairs are probed one by one, a full
-- pass's every pair is joined). $9 the claims window (stall_core.claims_window), $10 and
-- $11 the claims the last tick read (todo ids, stamps). Each write is compare-and-set on
-- the row as this snapshot read it.
WITH RECURSIVE pairs AS (
    -- The full pass's pairs with pending todos: a skip scan of the pending index, each step
    -- one index-only descent to the next pair. Only pairs whose names fit an index entry
    -- (stall_core.names_fit): the others are never work.
    (SELECT t.endpoint_id, t.queue FROM host_todos t WHERE $7::text[] IS NULL AND t.state = 'pending'
        AND octet_length(t.endpoint_id::text) + octet_length(t.queue) <= 2000 ORDER BY t.endpoint_id, t.queue LIMIT 1)
    UNION ALL
    SELECT n.endpoint_id, n.queue FROM pairs p
     CROSS JOIN LATERAL (SELECT t.endpoint_id, t.queue FROM host_todos t WHERE t.state = 'pending'
                            AND octet_length(t.endpoint_id::text) + octet_length(t.queue) <= 2000
                            AND (t.endpoint_id, t.queue) > (p.endpoint_id, p.queue)
                          ORDER BY t.endpoint_id, t.queue LIMIT 1) n
),
found AS (
    -- Each pair to judge once, with its endpoint id in the host's type (key).
    SELECT p.endpoint_id::text AS endpoint_id, p.queue, p.endpoint_id AS key FROM pairs p
    UNION ALL
    SELECT o.endpoint_id, o.queue,
           (json_populate_record(NULL::host_endpoints, json_build_object('id', o.endpoint_id))).id
      FROM (SELECT r.endpoint_id, r.queue FROM queue_stall_nudges r WHERE $7 IS NULL
            UNION SELECT h.endpoint_id, h.queue FROM held h WHERE $7 IS NULL
            UNION SELECT g.* FROM unnest($7::text[], $8::text[]) g (endpoint_id, queue)) o
     WHERE NOT EXISTS (SELECT FROM pairs p WHERE (p.endpoint_id::text, p.queue) = (o.endpoint_id, o.queue))
),
judged AS MATERIALIZED (
    -- Each pair with its work and its ledger row, either possibly absent. The work
    -- (stall_core.work_of) is the oldest pending todo whose names fit, created at a readable
    -- instant (stall_core.readable), past the sender gate (stall_core.passes_gate: no
    -- delivery, or one there and not among the unverified), none in the quarantine queue;
    -- ties by id in code point order: one index-only descent.
    SELECT f.endpoint_id, f.queue, f.key, w.id::text AS todo_id, w.id AS todo_key, w.created_at,
           w.created_at < $1::timestamptz - $2::bigint * interval '1us' AS stalled,
           r.ctid AS row_ctid, r.nudges, r.last_nudged_at, r.named_todo, r.progressed_at
      FROM found f
      LEFT JOIN LATERAL (
            SELECT t.id, t.created_at FROM host_todos t
             WHERE t.endpoint_id = f.key AND t.queue = f.queue AND t.state = 'pending' AND f.queue <> $6
               AND octet_length(t.endpoint_id::text) + octet_length(t.queue) <= 2000
               AND t.created_at > '0001-01-01+00' AND t.created_at < '9999-12-31 23:59:59.999999+00'
               AND (t.delivery_id IS NULL
                    OR (EXISTS (SELECT FROM host_deliveries d WHERE d.id = t.delivery_id)
                        AND NOT EXISTS (SELECT FROM host_deliveries u
                                         WHERE u.id = t.delivery_id AND NOT u.verified)))
             ORDER BY t.created_at, t.id::text COLLATE "C" LIMIT 1) w ON true
      LEFT JOIN queue_stall_nudges r USING (endpoint_id, queue)
),
reads AS MATERIALIZED (
    -- The claims this tick reads (stall_core.claims_read): one range scan of the activity
    -- index (a claimed todo's key is its claimed_at).
    SELECT c.endpoint_id, c.queue, c.id::text AS id, c.claimed_at FROM host_todos c
     WHERE coalesce(c.claimed_at, c.created_at) > $9 AND c.claimed_at < '9999-12-31 23:59:59.999999+00' AND c.state <> 'pending'
),
recent AS (
    -- Each pair's latest new claim, one the last tick did not read (stall_core.latest_claim).
    SELECT w.endpoint_id, w.queue, max(w.claimed_at) AS latest FROM reads w
     WHERE (w.id, w.claimed_at) NOT IN (SELECT * FROM unnest($10::text[], $11::timestamptz[]))
     GROUP BY w.endpoint_id, w.queue
),
assessed AS MATERIALIZED (
    -- Each pair with work: whether it progressed (stall_core.made_progress: kept by a reset,
    -- a new claim, or the named todo no longer pending in the pair) and its count since
    -- progress (stall_core.effective_nudges).
    SELECT j.*, p.progressed,
           CASE WHEN j.row_ctid IS NULL OR p.progressed THEN 0 ELSE j.nudges END AS spent
      FROM judged j
      LEFT JOIN recent c ON (c.endpoint_id, c.queue) = (j.key, j.queue)
     CROSS JOIN LATERAL (
            SELECT j.row_ctid IS NOT NULL
                   AND (j.progressed_at IS NOT NULL
                        OR c.latest IS NOT NULL
                        OR (j.named_todo <> j.todo_id AND NOT EXISTS (
                                SELECT 1 FROM host_todos n WHERE n.id = (json_populate_record(
                                          NULL::host_todos, json_build_object('id', j.named_todo))).id
                                   AND n.state = 'pending' AND (n.endpoint_id, n.queue) = (j.key, j.queue))))
                   AS progressed) p
     WHERE j.todo_id IS NOT NULL
),
ranked AS (
    -- Every due pair (stall_core.is_due): a candidate (stall_core.is_candidate: stalled, an
    -- active endpoint, an enabled hook covering the queue) with no row or progress, or below
    -- the cap (stall_core.capped) with its backoff step over (stall_core.next_due_at), in
    -- charge order (stall_core.charge_order).
    SELECT a.*, row_number() OVER (
                ORDER BY a.spent, a.created_at, a.endpoint_id COLLATE "C", a.queue COLLATE "C") AS rank
      FROM assessed a
     WHERE a.stalled AND (a.row_ctid IS NULL OR a.progressed OR (a.nudges < $4
                AND a.last_nudged_at <= $1 - interval '1us' * ($3::bigint[])[LEAST(GREATEST(a.nudges, 1), cardinality($3))]))
       AND EXISTS (SELECT FROM host_endpoints e WHERE e.id = a.key AND e.state = 'active')
       AND EXISTS (SELECT FROM host_notify_hooks h WHERE h.endpoint_id = a.key AND h.enabled
                      AND (h.queues IS NULL OR a.queue = ANY (h.queues)))
       -- Not silenced (stall_core.silences_pair): neither charged nor held, its row kept.
       AND NOT EXISTS (SELECT FROM silences WHERE (endpoint_id, coalesce(queue, a.queue)) = (a.endpoint_id, a.queue) AND ends_at > $1)
),
charged AS (
    -- The best tick_limit (stall_core.plan_tick): nudge spent + 1, naming the work, stamped
    -- now (stall_core.charge_row). A row is advanced only while it is the very version this
    -- snapshot read.
    INSERT INTO queue_stall_nudges AS n (endpoint_id, queue, nudges, last_nudged_at, named_todo)
    SELECT r.endpoint_id, r.queue, r.spent + 1, $1, r.todo_id FROM ranked r WHERE r.rank <= $5
    ON CONFLICT (endpoint_id, queue) DO UPDATE
       SET nudges = EXCLUDED.nudges, last_nudged_at = EXCLUDED.last_nudged_at,
           named_todo = EXCLUDED.named_todo, progressed_at = NULL
     WHERE (n.ctid, n.nudges, n.last_nudged_at) = (SELECT r.row_ctid, r.nudges, r.last_nudged_at
                                                   FROM ranked r WHERE (r.endpoint_id, r.queue) = (n.endpoint_id, n.queue))
    RETURNING n.endpoint_id, n.queue, n.nudges, n.last_nudged_at
),
cleared AS (
    -- A row whose pair has no work left is cleared (stall_core.plan_tick).
    DELETE FROM queue_stall_nudges n USING judged j
     WHERE n.ctid = j.row_ctid AND j.todo_id IS NULL AND (n.nudges, n.last_nudged_at) = (j.nudges, j.last_nudged_at)
    RETURNING n.endpoint_id, n.queue
),
reset AS (
    -- Progress no charge answers is kept, count 0 (stall_core.reset_row).
    UPDATE queue_stall_nudges n SET nudges = 0, progressed_at = $1
      FROM assessed a
     WHERE n.ctid = a.row_ctid AND a.progressed AND a.progressed_at IS NULL
       AND (n.nudges, n.last_nudged_at) = (a.nudges, a.last_nudged_at)
       AND NOT EXISTS (SELECT FROM ranked r WHERE r.row_ctid = a.row_ctid AND r.rank <= $5)
),
held_back AS (
    -- Due pairs the tick limit held back wait for the next tick. An entry already as it
    -- should be is not touched (an upsert would lock it).
    INSERT INTO held AS h (endpoint_id, queue, spent, created_at)
    SELECT r.endpoint_id, r.queue, r.spent, r.created_at FROM ranked r
     WHERE r.rank > $5 AND NOT EXISTS (SELECT FROM held k
                                        WHERE (k.endpoint_id, k.queue, k.spent, k.created_at)
                                              = (r.endpoint_id, r.queue, r.spent, r.created_at))
    ON CONFLICT (endpoint_id, queue) DO UPDATE SET spent = EXCLUDED.spent, created_at = EXCLUDED.created_at
),
released AS (
    -- Every other pair judged leaves held: it was charged, or is no longer due.
    DELETE FROM held h USING found f
     WHERE (h.endpoint_id, h.queue) = (f.endpoint_id, f.queue)
       AND NOT EXISTS (SELECT FROM ranked r WHERE (r.endpoint_id, r.queue) = (f.endpoint_id, f.queue) AND r.rank > $5)
)
SELECT 'charge' AS kind, c.endpoint_id, c.queue, c.nudges, c.last_nudged_at, r.todo_id, r.created_at,
       (SELECT t.title FROM host_todos t WHERE t.id = r.todo_key), r.rank
  FROM charged c JOIN ranked r ON (r.endpoint_id, r.queue) = (c.endpoint_id, c.queue)
UNION ALL
SELECT 'clear', x.endpoint_id, x.queue, NULL, NULL, NULL, NULL, NULL, NULL FROM cleared x
UNION ALL
SELECT 'judged', NULL, NULL, (SELECT count(*) FROM judged)::int, NULL, NULL, NULL, NULL, NULL
UNION ALL
-- The claims read (todo id, stamp), with their pairs.
SELECT 'read', w.endpoint_id::text, w.queue, NULL, NULL, w.id, w.claimed_at, NULL, NULL FROM reads w
ORDER BY 1, 9;

-- name: record_tick
-- The fleet's record of this tick: when it swept (database time) and at what interval, what it judged and the claims it read, and for a full pass when, how long and how many pairs.
-- $1 now, $2 the sweeping instance's interval (ms; NULL: keep the last), $3 the tick's kind
-- (delta or full), $4 pairs judged, $5 how long it took (ms; kept for a full pass), $6 and
-- $7 the claims it read (todo ids, stamps). judged_to is where the next delta reads from
-- (less its lookback).
INSERT INTO ticks AS s (swept_at, interval_ms, judged_to, last_kind, last_judged, claims_read_ids,
                        claims_read_at, full_pass_at, full_pass_ms, full_pass_pairs)
VALUES ($1, $2, $1, $3, $4, $6, $7, CASE WHEN $3 = 'full' THEN $1::timestamptz END,
        CASE WHEN $3 = 'full' THEN $5::float8 END, CASE WHEN $3 = 'full' THEN $4::int END)
ON CONFLICT (singleton) DO UPDATE
   SET swept_at = EXCLUDED.swept_at,
       interval_ms = coalesce(EXCLUDED.interval_ms, s.interval_ms),
       judged_to = EXCLUDED.judged_to,
       last_kind = EXCLUDED.last_kind,
       last_judged = EXCLUDED.last_judged,
       claims_read_ids = EXCLUDED.claims_read_ids,
       claims_read_at = EXCLUDED.claims_read_at,
       full_pass_at = coalesce(EXCLUDED.full_pass_at, s.full_pass_at),
       full_pass_ms = coalesce(EXCLUDED.full_pass_ms, s.full_pass_ms),
       full_pass_pairs = coalesce(EXCLUDED.full_pass_pairs, s.full_pass_pairs);

-- name: hold_tick
-- Wait for the fleet's tick lock and hold it until this transaction ends: ticks skip meanwhile.
-- $1 the lock's key.
SELECT pg_advisory_xact_lock($1);

-- name: refund
-- Take back a nudge that reached no receiver (stall_core.refunded_row): compare-and-set on the row its charge wrote.
-- $1 endpoint_id, $2 queue, $3 the nudge's number, $4 its stamp, $5 the todo it named. A
-- later charge changed the stamp or the named todo, a reset the count, a clear deleted the
-- row: none is undone. Run after hold_tick in the same transaction, so no tick's snapshot
-- straddles it.
UPDATE queue_stall_nudges
   SET nudges = nudges - 1
 WHERE endpoint_id = $1 AND queue = $2 AND nudges = $3 AND last_nudged_at = $4
   AND named_todo = $5
RETURNING nudges;

-- name: operator_lock
-- Make this transaction a guest's and wait for the fleet's tick lock: an operator's nudge now runs a tick, after the one in progress.
-- $1 the lock's key, $2 statement and lock timeout (ms, as text): the wait is bounded by it.
SELECT pg_catalog.clock_timestamp() AS now
  FROM (SELECT pg_catalog.set_config('search_path', 'pg_catalog, stall_nudge, pg_temp', true),
               pg_catalog.set_config('statement_timeout', $2, true),
               pg_catalog.set_config('lock_timeout', $2, true),
               pg_catalog.set_config('jit', 'off', true),
               pg_catalog.set_config('work_mem', '64MB', true),
               pg_catalog.pg_advisory_xact_lock($1)
        OFFSET 0) l;

-- name: history_charges
-- Book a tick's charges in the history, in the tick's transaction: one row per charge.
-- $1 endpoint ids, $2 queues, $3 nudge numbers, $4 named todos, $5 the tick's now (each
-- charge's stamp, which with the pair and number identifies it).
INSERT INTO history (at, endpoint_id, queue, event, nudge, todo_id)
SELECT $5, c.endpoint_id, c.queue, 'charged', c.nudge, c.todo_id
  FROM unnest($1::text[], $2::text[], $3::int[], $4::text[]) c (endpoint_id, queue, nudge, todo_id);

-- name: prune
-- Delete at most a batch of history rows, and of silences, that ended before the retention.
-- $1 the cutoff (now less the retention), $2 the batch: bounded work a tick.
WITH history_gone AS (
    DELETE FROM history WHERE ctid = ANY (ARRAY(
        SELECT h.ctid FROM history h WHERE h.at < $1 ORDER BY h.at LIMIT $2))
    RETURNING 1
), silences_gone AS (
    DELETE FROM silences WHERE ctid = ANY (ARRAY(
        SELECT s.ctid FROM silences s WHERE s.ends_at < $1 ORDER BY s.ends_at LIMIT $2))
    RETURNING 1
)
SELECT (SELECT count(*) FROM history_gone) + (SELECT count(*) FROM silences_gone);
