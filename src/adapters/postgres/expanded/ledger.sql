-- statement: guest
-- Make this transaction a guest's, and read the host's schema: from here on it resolves functions, operators and types in pg_catalog alone (then its own temporary schema), so nothing another role creates in the host's schema ever runs as ours.
-- Local to the transaction: the session's own search_path (an embedder's pool) is untouched.
-- The host's tables are named with the schema migrate recorded (NULL: not migrated).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true),
       (SELECT g.host_schema FROM stall_nudge.settings g) AS host_schema;

-- statement: tick_lock
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

-- statement: tick_record
-- With the tick lock held: the time and the fleet's record, in a snapshot taken after the lock.
-- The sweep before this one committed before the lock was free, so it is seen here: a
-- sweep's "now" is never earlier than that commit, and the fleet never sweeps twice
-- within an interval because one snapshot predates the other's commit.
SELECT clock_timestamp() AS now, s.swept_at, s.judged_to, s.full_pass_at, s.full_pass_pairs,
       g.host_schema
  FROM (SELECT 1) one
  LEFT JOIN stall_nudge.sweeps s ON true
  LEFT JOIN stall_nudge.settings g ON true;

-- statement: plan_once
-- From here on in this transaction, plan each statement once per connection, whatever its values.
-- The judging statement's plan does not depend on them (every read of a host table is one
-- descent for one pair), and planning it costs more than running it on a few pairs. The
-- delta's finding statement, whose range scans do depend on them, runs before this.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true);

-- statement: record_sweep
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

-- statement: hold_tick
-- Wait for the fleet's tick lock and hold it until this transaction ends: sweeps skip meanwhile.
-- $1 the tick lock's key.
SELECT pg_advisory_xact_lock($1);

-- statement: refund
-- Take back a nudge that reached no receiver: compare-and-set on the row its charge wrote.
-- mirrors stall_core.refunded_row
-- $1 endpoint_id, $2 queue, $3 the nudge's number, $4 its charged_at (the stamp it wrote),
-- $5 the todo it named. A later charge changed the stamp or the named todo, a reset the
-- count, a drain deleted the row: none is undone. Run after hold_tick in the same
-- transaction, so no sweep's snapshot straddles it.
UPDATE @queue_stall_nudges r
   SET nudges = nudges - 1
 WHERE (md5(r.endpoint_id) = md5($1::text) AND md5(r.queue) = md5($2)
 AND r.endpoint_id = $1::text AND r.queue = $2) AND nudges = $3 AND last_nudged_at = $4 AND named_todo = $5
RETURNING nudges;

-- statement: now
-- The database's clock, the time authority every decision is measured on.
SELECT clock_timestamp();

-- statement: ledger_rows
-- Every ledger row, for inspection and tests.
SELECT endpoint_id, queue, nudges, last_nudged_at, named_todo, progressed_at
  FROM @queue_stall_nudges;

-- statement: count_ledger_rows
-- How many ledger rows there are (the metrics' gauge, read after a tick that may change it).
SELECT count(*) FROM @queue_stall_nudges;

-- statement: sweep_record
-- The fleet's record of its sweeps, for status.
SELECT s.swept_at, s.interval_ms, s.last_kind, s.last_judged, s.full_pass_at, s.full_pass_ms,
       s.full_pass_pairs
  FROM (SELECT 1) one
  LEFT JOIN stall_nudge.sweeps s ON true;

-- statement: tick_full
-- tick_full: find_every_pair + judge + report
WITH RECURSIVE
-- The full pass: every pair with a pending todo, a ledger row or a held entry. Its cost
-- follows pairs, not todos: a skip scan of the pending index, each step one descent to
-- the next pair's first entry (its head: the oldest pending todo), read with its row.
-- The judging part reads each head in the same snapshot, so it is current. Defines heads
-- and found.
heads AS (
    (SELECT t.endpoint_id, t.queue, t.created_at, t.id, t.delivery_id FROM @todos t
      WHERE t.state = 'pending' AND (octet_length(t.endpoint_id::text) + octet_length(t.queue) <= 2000)
      ORDER BY t.endpoint_id, t.queue, t.created_at
      LIMIT 1)
    UNION ALL
    SELECT n.*
      FROM heads p
     CROSS JOIN LATERAL (SELECT t.endpoint_id, t.queue, t.created_at, t.id, t.delivery_id
                           FROM @todos t
                          WHERE t.state = 'pending' AND (octet_length(t.endpoint_id::text) + octet_length(t.queue) <= 2000)
                            AND (t.endpoint_id, t.queue) > (p.endpoint_id, p.queue)
                          ORDER BY t.endpoint_id, t.queue, t.created_at
                          LIMIT 1) n
),
found AS (
    -- A head is the pair's work when it passes the gate, was created at a readable
    -- instant and no other pending todo has its instant (ties go by id: an index-only
    -- count), and the pair is not quarantined.
    SELECT h.endpoint_id::text AS endpoint_id, h.queue, h.endpoint_id AS key,
           CASE WHEN (h.delivery_id IS NULL
 OR (EXISTS (SELECT 1 FROM @deliveries gate_d WHERE gate_d.id = h.delivery_id)
     AND NOT EXISTS (SELECT 1 FROM @deliveries gate_u
                      WHERE gate_u.id = h.delivery_id AND NOT gate_u.verified))) AND (h.created_at > '0001-01-01 00:00:00+00'::timestamptz
 AND h.created_at < '9999-12-31 23:59:59.999999+00'::timestamptz)
                     AND (SELECT count(*)
                            FROM (SELECT 1 FROM @todos x
                                   WHERE x.endpoint_id = h.endpoint_id AND x.queue = h.queue
                                     AND x.state = 'pending' AND x.created_at = h.created_at
                                   LIMIT 2) x) = 1
                THEN h.id::text END AS head,
           h.created_at AS head_at
      FROM heads h
    UNION ALL
    -- Pairs the skip scan does not reach: long names, and ledger rows and held entries
    -- with no pending todo.
    SELECT o.endpoint_id, o.queue, (json_populate_record(NULL::@endpoints, json_build_object('id', o.endpoint_id::text))).id, NULL, NULL
      FROM (SELECT t.endpoint_id::text AS endpoint_id, t.queue FROM @todos t
             WHERE t.state = 'pending' AND NOT (octet_length(t.endpoint_id::text) + octet_length(t.queue) <= 2000)
            UNION
            SELECT r.endpoint_id, r.queue FROM @queue_stall_nudges r
            UNION
            SELECT h.endpoint_id, h.queue FROM stall_nudge.held h) o
     WHERE NOT EXISTS (SELECT 1 FROM heads h
                        WHERE h.endpoint_id::text = o.endpoint_id AND h.queue = o.queue)
),
-- The same for both kinds of tick. Judge each pair found on the current rows, by the
-- core's rules, and act: charge the best tick_limit due pairs, delete the rows of pairs left with no work, reset the rows
-- whose progress no charge answers, and keep the due pairs held back for the next tick.
-- Reads found; defines judged, assessed, ranked, charged, drained, reset, held and
-- released. Each write is compare-and-set on the ledger row as this snapshot read it:
-- the due rule re-checked at lock time.
judged AS MATERIALIZED (
    -- Each pair with its work (the head, or one descent) and its ledger row, either
    -- possibly absent.
    SELECT f.endpoint_id, f.queue, f.key, w.id AS todo_id, w.created_at,
           r.ctid AS row_ctid, r.nudges, r.last_nudged_at, r.named_todo, r.progressed_at
      FROM found f
      LEFT JOIN LATERAL (SELECT f.head AS id, f.head_at AS created_at
 WHERE f.head IS NOT NULL AND f.queue <> $6
UNION ALL
SELECT o.id, o.created_at
  FROM (SELECT oldest_w.id, oldest_w.created_at
  FROM ((SELECT work_t.id::text AS id, work_t.created_at
           FROM @todos work_t
          WHERE f.queue <> $6 AND (octet_length(f.endpoint_id::text) + octet_length(f.queue) <= 2000)
            AND work_t.endpoint_id = f.key AND work_t.queue = f.queue
            AND work_t.state = 'pending' AND (octet_length(work_t.endpoint_id::text) + octet_length(work_t.queue) <= 2000)
            AND (work_t.created_at > '0001-01-01 00:00:00+00'::timestamptz
 AND work_t.created_at < '9999-12-31 23:59:59.999999+00'::timestamptz) AND (work_t.delivery_id IS NULL
 OR (EXISTS (SELECT 1 FROM @deliveries gate_d WHERE gate_d.id = work_t.delivery_id)
     AND NOT EXISTS (SELECT 1 FROM @deliveries gate_u
                      WHERE gate_u.id = work_t.delivery_id AND NOT gate_u.verified)))
          ORDER BY work_t.created_at, work_t.id::text COLLATE "C"
          LIMIT 1)
        UNION ALL
        (SELECT long_t.id::text, long_t.created_at
           FROM @todos long_t
          WHERE f.queue <> $6 AND NOT (octet_length(f.endpoint_id::text) + octet_length(f.queue) <= 2000)
            AND (md5(long_t.endpoint_id::text) = md5(f.endpoint_id::text) AND md5(long_t.queue) = md5(f.queue)
 AND long_t.endpoint_id::text = f.endpoint_id::text AND long_t.queue = f.queue
 AND NOT (octet_length(long_t.endpoint_id::text) + octet_length(long_t.queue) <= 2000))
            AND long_t.state = 'pending' AND (long_t.created_at > '0001-01-01 00:00:00+00'::timestamptz
 AND long_t.created_at < '9999-12-31 23:59:59.999999+00'::timestamptz)
            AND (long_t.delivery_id IS NULL
 OR (EXISTS (SELECT 1 FROM @deliveries gate_d WHERE gate_d.id = long_t.delivery_id)
     AND NOT EXISTS (SELECT 1 FROM @deliveries gate_u
                      WHERE gate_u.id = long_t.delivery_id AND NOT gate_u.verified)))
          ORDER BY long_t.created_at, long_t.id::text COLLATE "C"
          LIMIT 1)) oldest_w) o
 WHERE f.head IS NULL) w
        ON true
      LEFT JOIN @queue_stall_nudges r ON (md5(r.endpoint_id) = md5(f.endpoint_id::text) AND md5(r.queue) = md5(f.queue)
 AND r.endpoint_id = f.endpoint_id::text AND r.queue = f.queue)
),
assessed AS MATERIALIZED (
    -- mirrors stall_core.made_progress, stall_core.effective_nudges
    -- Each pair with work: its latest claim (for a row, or work past the threshold: a
    -- charge's stamp), its progress (kept by a reset, a claim stamped after the last
    -- nudge, or the named todo departed; the work is the named todo on most rows, which
    -- spares the probe) and its count since progress.
    SELECT j.*, p.latest, p.progressed,
           CASE WHEN j.row_ctid IS NULL OR p.progressed THEN 0 ELSE j.nudges END AS spent
      FROM judged j
     CROSS JOIN LATERAL (SELECT CASE WHEN j.row_ctid IS NOT NULL
                                       OR (j.created_at < $1::timestamptz - $2::bigint * interval '1 microsecond')
                                     THEN coalesce((SELECT claimed_t.claimed_at FROM @todos claimed_t
           WHERE (octet_length(j.endpoint_id::text) + octet_length(j.queue) <= 2000)
             AND claimed_t.endpoint_id = j.key AND claimed_t.queue = j.queue
             AND claimed_t.claimed_at IS NOT NULL AND (octet_length(claimed_t.endpoint_id::text) + octet_length(claimed_t.queue) <= 2000)
             AND (claimed_t.claimed_at > '0001-01-01 00:00:00+00'::timestamptz
 AND claimed_t.claimed_at < '9999-12-31 23:59:59.999999+00'::timestamptz)
           ORDER BY claimed_t.claimed_at DESC
           LIMIT 1),
         (SELECT claimed_l.claimed_at FROM @todos claimed_l
           WHERE NOT (octet_length(j.endpoint_id::text) + octet_length(j.queue) <= 2000)
             AND (md5(claimed_l.endpoint_id::text) = md5(j.endpoint_id::text) AND md5(claimed_l.queue) = md5(j.queue)
 AND claimed_l.endpoint_id::text = j.endpoint_id::text AND claimed_l.queue = j.queue
 AND NOT (octet_length(claimed_l.endpoint_id::text) + octet_length(claimed_l.queue) <= 2000))
             AND claimed_l.claimed_at IS NOT NULL AND (claimed_l.claimed_at > '0001-01-01 00:00:00+00'::timestamptz
 AND claimed_l.claimed_at < '9999-12-31 23:59:59.999999+00'::timestamptz)
           ORDER BY claimed_l.claimed_at DESC
           LIMIT 1))
                                END AS latest
                         OFFSET 0) l
     CROSS JOIN LATERAL (
            SELECT l.latest,
                   j.row_ctid IS NOT NULL
                   AND (j.progressed_at IS NOT NULL OR l.latest > j.last_nudged_at
                        OR (j.named_todo <> j.todo_id
                            AND NOT EXISTS (SELECT 1 FROM @todos named_t
         WHERE named_t.id = (json_populate_record(NULL::@todos, json_build_object('id', j.named_todo::text))).id AND named_t.state = 'pending'
           AND named_t.endpoint_id = j.key AND named_t.queue = j.queue))) AS progressed
           ) p
     WHERE j.todo_id IS NOT NULL
),
ranked AS (
    -- mirrors stall_core.is_due
    -- Every due pair (a candidate with no row or progress, or below the cap with its
    -- backoff over), ranked least nudged, oldest work, then names by code point.
    SELECT a.*,
           row_number() OVER (ORDER BY a.spent, a.created_at, a.endpoint_id COLLATE "C", a.queue COLLATE "C") AS rank
      FROM assessed a
     WHERE (a.created_at < $1::timestamptz - $2::bigint * interval '1 microsecond')
       AND (a.row_ctid IS NULL OR a.progressed
            OR (a.nudges < $4
                AND (a.last_nudged_at <= $1::timestamptz - (($3::bigint[])[LEAST(GREATEST(a.nudges, 1), cardinality($3::bigint[]))]
 * interval '1 microsecond'))))
       AND EXISTS (SELECT 1 FROM @endpoints active_e WHERE active_e.id = a.key AND active_e.state = 'active') AND EXISTS (SELECT 1 FROM @notify_hooks receiver_h
         WHERE (receiver_h.endpoint_id = a.key AND (receiver_h.queues IS NULL OR a.queue = ANY (receiver_h.queues))) AND receiver_h.enabled)
),
charged AS (
    -- mirrors stall_core.plan_tick, stall_core.charge_row, stall_core.charge_stamp
    -- The best tick_limit: nudge spent + 1, stamped now or the pair's latest claim if
    -- later, so that claim is never "after the last nudge" again. A row is advanced only
    -- while it is the very row version this snapshot read (its ctid: behind the tick
    -- lock, which refunds take too, it always is); one a sweeper beside the lock wrote
    -- since is left alone, even when its count and stamp came out the same.
    INSERT INTO @queue_stall_nudges AS n (endpoint_id, queue, nudges, last_nudged_at, named_todo)
    SELECT r.endpoint_id, r.queue, r.spent + 1, GREATEST($1::timestamptz, r.latest), r.todo_id
      FROM ranked r
     WHERE r.rank <= $5
    ON CONFLICT ((md5(endpoint_id)), (md5(queue))) DO UPDATE
       SET nudges = EXCLUDED.nudges, last_nudged_at = EXCLUDED.last_nudged_at,
           named_todo = EXCLUDED.named_todo, progressed_at = NULL
     WHERE (n.ctid, n.nudges, n.last_nudged_at)
           = (SELECT r.row_ctid, r.nudges, r.last_nudged_at FROM ranked r
               WHERE r.endpoint_id = n.endpoint_id AND r.queue = n.queue)
    RETURNING n.endpoint_id, n.queue, n.nudges, n.last_nudged_at
),
drained AS (
    -- mirrors stall_core.plan_tick (Drain)
    -- A ledger row whose pair has no work left goes (found by its ctid: a TID scan).
    DELETE FROM @queue_stall_nudges n
     USING judged j
     WHERE n.ctid = j.row_ctid AND j.todo_id IS NULL
       AND (n.nudges, n.last_nudged_at) = (j.nudges, j.last_nudged_at)
    RETURNING n.endpoint_id, n.queue
),
reset AS (
    -- mirrors stall_core.plan_tick (Reset), stall_core.reset_row
    -- A row with progress this tick does not charge (held back, or no candidate now)
    -- keeps it, count 0.
    UPDATE @queue_stall_nudges n
       SET nudges = 0, progressed_at = $1
      FROM assessed a
     WHERE n.ctid = a.row_ctid AND a.progressed AND a.progressed_at IS NULL
       AND (n.nudges, n.last_nudged_at) = (a.nudges, a.last_nudged_at)
       AND a.row_ctid NOT IN (SELECT r.row_ctid FROM ranked r
                               WHERE r.rank <= $5 AND r.row_ctid IS NOT NULL)
),
held AS (
    -- Due pairs the tick limit held back wait here for the next tick, in charge order.
    -- An entry already as it should be is not touched (an upsert would lock it).
    INSERT INTO stall_nudge.held AS h (endpoint_id, queue, spent, created_at)
    SELECT r.endpoint_id, r.queue, r.spent, r.created_at
      FROM ranked r
     WHERE r.rank > $5
       AND NOT EXISTS (SELECT 1 FROM stall_nudge.held k
                        WHERE (md5(k.endpoint_id) = md5(r.endpoint_id::text) AND md5(k.queue) = md5(r.queue)
 AND k.endpoint_id = r.endpoint_id::text AND k.queue = r.queue)
                          AND (k.spent, k.created_at) = (r.spent, r.created_at))
    ON CONFLICT ((md5(endpoint_id)), (md5(queue)))
    DO UPDATE SET spent = EXCLUDED.spent, created_at = EXCLUDED.created_at
     WHERE (h.spent, h.created_at) <> (EXCLUDED.spent, EXCLUDED.created_at)
),
released AS (
    -- Every other pair judged leaves: it was charged, or is no longer due.
    DELETE FROM stall_nudge.held h
     USING found f
     WHERE (md5(h.endpoint_id) = md5(f.endpoint_id::text) AND md5(h.queue) = md5(f.queue)
 AND h.endpoint_id = f.endpoint_id::text AND h.queue = f.queue)
       AND (f.endpoint_id, f.queue) NOT IN (SELECT r.endpoint_id, r.queue FROM ranked r
                                             WHERE r.rank > $5)
)
-- What the tick did: each charge (with the todo it names; the title is read for these
-- few only, one probe each) in charge order, each drained pair, and how many pairs it judged. Reads
-- charged, ranked, drained and judged.
SELECT 'charge' AS kind, c.endpoint_id, c.queue, c.nudges, c.last_nudged_at,
       r.todo_id, r.created_at,
       (SELECT t.title FROM @todos t WHERE t.id = (json_populate_record(NULL::@todos, json_build_object('id', r.todo_id::text))).id) AS title, r.rank
  FROM charged c
  JOIN ranked r ON r.endpoint_id = c.endpoint_id AND r.queue = c.queue
UNION ALL
SELECT 'drain', x.endpoint_id, x.queue, NULL, NULL, NULL, NULL, NULL, NULL
  FROM drained x
UNION ALL
SELECT 'judged', NULL, NULL, (SELECT count(*) FROM judged)::int, NULL, NULL, NULL, NULL, NULL
ORDER BY 1, 9

-- statement: tick_changed
-- tick_changed: find_changed + changed_pairs
WITH RECURSIVE
-- The delta's finding statement (sent alone, planned for its own parameters, before the
-- judging one): the pairs whose decision can have changed since the last judging tick,
-- from the host's own timestamps since the watermark ($7: that tick's now less the
-- lookback, which covers transactions still open then) and from our own tables. What no
-- timestamp shows (a delete, a change of endpoint, hook or verification, a row written
-- with an old stamp) waits for the full pass. Each read of the host's rows stops at $9
-- rows: a change set that large is cheaper judged by a full pass (after an outage, say).
-- Defines claimed, requeued, arrived and changed.
claimed AS (
    -- Claims stamped since the watermark that are progress to a row (stall_core.
    -- made_progress: stamped after its last nudge, none kept yet; readable, so a claim
    -- stamped infinity is not found by every delta).
    SELECT c.endpoint_id, c.queue, c.claimed_at FROM @todos c
     WHERE c.claimed_at > $7 AND (c.claimed_at > '0001-01-01 00:00:00+00'::timestamptz
 AND c.claimed_at < '9999-12-31 23:59:59.999999+00'::timestamptz)
     LIMIT $9
),
requeued AS (
    -- Todos given back since the last full pass ($8, less the lookback): work again. A
    -- host that clears claimed_at when it requeues, or stamps it with an instant that is
    -- not readable (then found again by every delta), waits for the full pass.
    SELECT q.endpoint_id, q.queue FROM @todos q
     WHERE q.state = 'pending' AND q.claimed_at > $8 AND (q.claimed_at > '0001-01-01 00:00:00+00'::timestamptz
 AND q.claimed_at < '9999-12-31 23:59:59.999999+00'::timestamptz)
     LIMIT $9
),
arrived AS (
    -- Pending todos that crossed the threshold since the watermark, outside the quarantine
    -- queue (never work).
    SELECT a.endpoint_id, a.queue FROM @todos a
     WHERE a.state = 'pending' AND NOT (a.created_at < $7::timestamptz - $2::bigint * interval '1 microsecond')
       AND (a.created_at < $1::timestamptz - $2::bigint * interval '1 microsecond') AND a.queue <> $6
     LIMIT $9
),
changed AS (
    SELECT c.endpoint_id::text AS endpoint_id, c.queue FROM claimed c
     WHERE EXISTS (SELECT 1 FROM @queue_stall_nudges r
                    WHERE (md5(r.endpoint_id) = md5(c.endpoint_id::text) AND md5(r.queue) = md5(c.queue)
 AND r.endpoint_id = c.endpoint_id::text AND r.queue = c.queue)
                      AND r.progressed_at IS NULL AND c.claimed_at > r.last_nudged_at)
    UNION
    SELECT q.endpoint_id::text, q.queue FROM requeued q
    UNION
    -- A crossing matters to a pair with no ledger row or with progress kept (a candidate
    -- now, perhaps, where its work was fresh); the others wait on their backoff, and the
    -- pairs held back are found below.
    SELECT a.endpoint_id::text, a.queue FROM arrived a
     WHERE NOT EXISTS (SELECT 1 FROM @queue_stall_nudges r
                        WHERE (md5(r.endpoint_id) = md5(a.endpoint_id::text) AND md5(r.queue) = md5(a.queue)
 AND r.endpoint_id = a.endpoint_id::text AND r.queue = a.queue) AND r.progressed_at IS NULL)
       AND NOT EXISTS (SELECT 1 FROM stall_nudge.held h
                        WHERE (md5(h.endpoint_id) = md5(a.endpoint_id::text) AND md5(h.queue) = md5(a.queue)
 AND h.endpoint_id = a.endpoint_id::text AND h.queue = a.queue))
    UNION
    -- Ledger rows whose backoff step ended since the watermark (a range scan of
    -- stall_nudge_ledger_due per count below the cap).
    SELECT r.endpoint_id, r.queue
      FROM generate_series(0, $4 - 1) AS s (nudges)
     CROSS JOIN LATERAL (SELECT r.endpoint_id, r.queue FROM @queue_stall_nudges r
                          WHERE r.nudges = s.nudges
                            AND NOT (r.last_nudged_at <= $7::timestamptz - (($3::bigint[])[LEAST(GREATEST(s.nudges, 1), cardinality($3::bigint[]))]
 * interval '1 microsecond'))
                            AND (r.last_nudged_at <= $1::timestamptz - (($3::bigint[])[LEAST(GREATEST(s.nudges, 1), cardinality($3::bigint[]))]
 * interval '1 microsecond'))
                         OFFSET 0) r
    UNION
    -- Rows nudged since the last full pass whose named todo departed (the full pass
    -- looks at the rest): a consumer claims soon after its wake, and the host's
    -- moves and deletes no timestamp shows.
    SELECT r.endpoint_id, r.queue
      FROM generate_series(0, $4) AS s (nudges)
     CROSS JOIN LATERAL (SELECT r.endpoint_id, r.queue, r.named_todo FROM @queue_stall_nudges r
                          WHERE r.nudges = s.nudges AND r.last_nudged_at >= $8
                            AND r.progressed_at IS NULL AND r.named_todo IS NOT NULL
                         OFFSET 0) r
     CROSS JOIN LATERAL (SELECT (json_populate_record(NULL::@endpoints, json_build_object('id', r.endpoint_id::text))).id AS key) k
     WHERE NOT EXISTS (SELECT 1 FROM @todos named_t
         WHERE named_t.id = (json_populate_record(NULL::@todos, json_build_object('id', r.named_todo::text))).id AND named_t.state = 'pending'
           AND named_t.endpoint_id = k.key AND named_t.queue = r.queue)
    UNION
    -- The pairs the tick limit held back, best first: only the first tick_limit can be
    -- charged now.
    (SELECT h.endpoint_id, h.queue FROM stall_nudge.held h
      ORDER BY h.spent, h.created_at, h.endpoint_id COLLATE "C", h.queue COLLATE "C"
      LIMIT $5)
)
-- The pairs the delta found, as two arrays, and whether a read of the host's rows stopped
-- at its bound. Reads changed, claimed, requeued and arrived.
SELECT coalesce(array_agg(c.endpoint_id), '{}') AS endpoint_ids,
       coalesce(array_agg(c.queue), '{}') AS queues,
       (SELECT count(*) FROM claimed) >= $9 OR (SELECT count(*) FROM requeued) >= $9
       OR (SELECT count(*) FROM arrived) >= $9 AS overflow
  FROM changed c

-- statement: tick_judge
-- tick_judge: find_given + judge + report
WITH RECURSIVE
-- The pairs the delta's finding statement returned ($1 ... $6 as every tick's), each
-- once: $7 endpoint ids, $8 queues (no heads: the judge reads each pair's work). The
-- host's endpoint id is looked up once per endpoint. Defines found.
found AS (
    SELECT g.endpoint_id, g.queue, k.key, NULL::text AS head, NULL::timestamptz AS head_at
      FROM unnest($7::text[], $8::text[]) AS g (endpoint_id, queue)
      JOIN (SELECT e.endpoint_id, (json_populate_record(NULL::@endpoints, json_build_object('id', e.endpoint_id::text))).id AS key
              FROM (SELECT DISTINCT unnest($7::text[]) AS endpoint_id) e) k
        ON k.endpoint_id = g.endpoint_id
),
-- The same for both kinds of tick. Judge each pair found on the current rows, by the
-- core's rules, and act: charge the best tick_limit due pairs, delete the rows of pairs left with no work, reset the rows
-- whose progress no charge answers, and keep the due pairs held back for the next tick.
-- Reads found; defines judged, assessed, ranked, charged, drained, reset, held and
-- released. Each write is compare-and-set on the ledger row as this snapshot read it:
-- the due rule re-checked at lock time.
judged AS MATERIALIZED (
    -- Each pair with its work (the head, or one descent) and its ledger row, either
    -- possibly absent.
    SELECT f.endpoint_id, f.queue, f.key, w.id AS todo_id, w.created_at,
           r.ctid AS row_ctid, r.nudges, r.last_nudged_at, r.named_todo, r.progressed_at
      FROM found f
      LEFT JOIN LATERAL (SELECT f.head AS id, f.head_at AS created_at
 WHERE f.head IS NOT NULL AND f.queue <> $6
UNION ALL
SELECT o.id, o.created_at
  FROM (SELECT oldest_w.id, oldest_w.created_at
  FROM ((SELECT work_t.id::text AS id, work_t.created_at
           FROM @todos work_t
          WHERE f.queue <> $6 AND (octet_length(f.endpoint_id::text) + octet_length(f.queue) <= 2000)
            AND work_t.endpoint_id = f.key AND work_t.queue = f.queue
            AND work_t.state = 'pending' AND (octet_length(work_t.endpoint_id::text) + octet_length(work_t.queue) <= 2000)
            AND (work_t.created_at > '0001-01-01 00:00:00+00'::timestamptz
 AND work_t.created_at < '9999-12-31 23:59:59.999999+00'::timestamptz) AND (work_t.delivery_id IS NULL
 OR (EXISTS (SELECT 1 FROM @deliveries gate_d WHERE gate_d.id = work_t.delivery_id)
     AND NOT EXISTS (SELECT 1 FROM @deliveries gate_u
                      WHERE gate_u.id = work_t.delivery_id AND NOT gate_u.verified)))
          ORDER BY work_t.created_at, work_t.id::text COLLATE "C"
          LIMIT 1)
        UNION ALL
        (SELECT long_t.id::text, long_t.created_at
           FROM @todos long_t
          WHERE f.queue <> $6 AND NOT (octet_length(f.endpoint_id::text) + octet_length(f.queue) <= 2000)
            AND (md5(long_t.endpoint_id::text) = md5(f.endpoint_id::text) AND md5(long_t.queue) = md5(f.queue)
 AND long_t.endpoint_id::text = f.endpoint_id::text AND long_t.queue = f.queue
 AND NOT (octet_length(long_t.endpoint_id::text) + octet_length(long_t.queue) <= 2000))
            AND long_t.state = 'pending' AND (long_t.created_at > '0001-01-01 00:00:00+00'::timestamptz
 AND long_t.created_at < '9999-12-31 23:59:59.999999+00'::timestamptz)
            AND (long_t.delivery_id IS NULL
 OR (EXISTS (SELECT 1 FROM @deliveries gate_d WHERE gate_d.id = long_t.delivery_id)
     AND NOT EXISTS (SELECT 1 FROM @deliveries gate_u
                      WHERE gate_u.id = long_t.delivery_id AND NOT gate_u.verified)))
          ORDER BY long_t.created_at, long_t.id::text COLLATE "C"
          LIMIT 1)) oldest_w) o
 WHERE f.head IS NULL) w
        ON true
      LEFT JOIN @queue_stall_nudges r ON (md5(r.endpoint_id) = md5(f.endpoint_id::text) AND md5(r.queue) = md5(f.queue)
 AND r.endpoint_id = f.endpoint_id::text AND r.queue = f.queue)
),
assessed AS MATERIALIZED (
    -- mirrors stall_core.made_progress, stall_core.effective_nudges
    -- Each pair with work: its latest claim (for a row, or work past the threshold: a
    -- charge's stamp), its progress (kept by a reset, a claim stamped after the last
    -- nudge, or the named todo departed; the work is the named todo on most rows, which
    -- spares the probe) and its count since progress.
    SELECT j.*, p.latest, p.progressed,
           CASE WHEN j.row_ctid IS NULL OR p.progressed THEN 0 ELSE j.nudges END AS spent
      FROM judged j
     CROSS JOIN LATERAL (SELECT CASE WHEN j.row_ctid IS NOT NULL
                                       OR (j.created_at < $1::timestamptz - $2::bigint * interval '1 microsecond')
                                     THEN coalesce((SELECT claimed_t.claimed_at FROM @todos claimed_t
           WHERE (octet_length(j.endpoint_id::text) + octet_length(j.queue) <= 2000)
             AND claimed_t.endpoint_id = j.key AND claimed_t.queue = j.queue
             AND claimed_t.claimed_at IS NOT NULL AND (octet_length(claimed_t.endpoint_id::text) + octet_length(claimed_t.queue) <= 2000)
             AND (claimed_t.claimed_at > '0001-01-01 00:00:00+00'::timestamptz
 AND claimed_t.claimed_at < '9999-12-31 23:59:59.999999+00'::timestamptz)
           ORDER BY claimed_t.claimed_at DESC
           LIMIT 1),
         (SELECT claimed_l.claimed_at FROM @todos claimed_l
           WHERE NOT (octet_length(j.endpoint_id::text) + octet_length(j.queue) <= 2000)
             AND (md5(claimed_l.endpoint_id::text) = md5(j.endpoint_id::text) AND md5(claimed_l.queue) = md5(j.queue)
 AND claimed_l.endpoint_id::text = j.endpoint_id::text AND claimed_l.queue = j.queue
 AND NOT (octet_length(claimed_l.endpoint_id::text) + octet_length(claimed_l.queue) <= 2000))
             AND claimed_l.claimed_at IS NOT NULL AND (claimed_l.claimed_at > '0001-01-01 00:00:00+00'::timestamptz
 AND claimed_l.claimed_at < '9999-12-31 23:59:59.999999+00'::timestamptz)
           ORDER BY claimed_l.claimed_at DESC
           LIMIT 1))
                                END AS latest
                         OFFSET 0) l
     CROSS JOIN LATERAL (
            SELECT l.latest,
                   j.row_ctid IS NOT NULL
                   AND (j.progressed_at IS NOT NULL OR l.latest > j.last_nudged_at
                        OR (j.named_todo <> j.todo_id
                            AND NOT EXISTS (SELECT 1 FROM @todos named_t
         WHERE named_t.id = (json_populate_record(NULL::@todos, json_build_object('id', j.named_todo::text))).id AND named_t.state = 'pending'
           AND named_t.endpoint_id = j.key AND named_t.queue = j.queue))) AS progressed
           ) p
     WHERE j.todo_id IS NOT NULL
),
ranked AS (
    -- mirrors stall_core.is_due
    -- Every due pair (a candidate with no row or progress, or below the cap with its
    -- backoff over), ranked least nudged, oldest work, then names by code point.
    SELECT a.*,
           row_number() OVER (ORDER BY a.spent, a.created_at, a.endpoint_id COLLATE "C", a.queue COLLATE "C") AS rank
      FROM assessed a
     WHERE (a.created_at < $1::timestamptz - $2::bigint * interval '1 microsecond')
       AND (a.row_ctid IS NULL OR a.progressed
            OR (a.nudges < $4
                AND (a.last_nudged_at <= $1::timestamptz - (($3::bigint[])[LEAST(GREATEST(a.nudges, 1), cardinality($3::bigint[]))]
 * interval '1 microsecond'))))
       AND EXISTS (SELECT 1 FROM @endpoints active_e WHERE active_e.id = a.key AND active_e.state = 'active') AND EXISTS (SELECT 1 FROM @notify_hooks receiver_h
         WHERE (receiver_h.endpoint_id = a.key AND (receiver_h.queues IS NULL OR a.queue = ANY (receiver_h.queues))) AND receiver_h.enabled)
),
charged AS (
    -- mirrors stall_core.plan_tick, stall_core.charge_row, stall_core.charge_stamp
    -- The best tick_limit: nudge spent + 1, stamped now or the pair's latest claim if
    -- later, so that claim is never "after the last nudge" again. A row is advanced only
    -- while it is the very row version this snapshot read (its ctid: behind the tick
    -- lock, which refunds take too, it always is); one a sweeper beside the lock wrote
    -- since is left alone, even when its count and stamp came out the same.
    INSERT INTO @queue_stall_nudges AS n (endpoint_id, queue, nudges, last_nudged_at, named_todo)
    SELECT r.endpoint_id, r.queue, r.spent + 1, GREATEST($1::timestamptz, r.latest), r.todo_id
      FROM ranked r
     WHERE r.rank <= $5
    ON CONFLICT ((md5(endpoint_id)), (md5(queue))) DO UPDATE
       SET nudges = EXCLUDED.nudges, last_nudged_at = EXCLUDED.last_nudged_at,
           named_todo = EXCLUDED.named_todo, progressed_at = NULL
     WHERE (n.ctid, n.nudges, n.last_nudged_at)
           = (SELECT r.row_ctid, r.nudges, r.last_nudged_at FROM ranked r
               WHERE r.endpoint_id = n.endpoint_id AND r.queue = n.queue)
    RETURNING n.endpoint_id, n.queue, n.nudges, n.last_nudged_at
),
drained AS (
    -- mirrors stall_core.plan_tick (Drain)
    -- A ledger row whose pair has no work left goes (found by its ctid: a TID scan).
    DELETE FROM @queue_stall_nudges n
     USING judged j
     WHERE n.ctid = j.row_ctid AND j.todo_id IS NULL
       AND (n.nudges, n.last_nudged_at) = (j.nudges, j.last_nudged_at)
    RETURNING n.endpoint_id, n.queue
),
reset AS (
    -- mirrors stall_core.plan_tick (Reset), stall_core.reset_row
    -- A row with progress this tick does not charge (held back, or no candidate now)
    -- keeps it, count 0.
    UPDATE @queue_stall_nudges n
       SET nudges = 0, progressed_at = $1
      FROM assessed a
     WHERE n.ctid = a.row_ctid AND a.progressed AND a.progressed_at IS NULL
       AND (n.nudges, n.last_nudged_at) = (a.nudges, a.last_nudged_at)
       AND a.row_ctid NOT IN (SELECT r.row_ctid FROM ranked r
                               WHERE r.rank <= $5 AND r.row_ctid IS NOT NULL)
),
held AS (
    -- Due pairs the tick limit held back wait here for the next tick, in charge order.
    -- An entry already as it should be is not touched (an upsert would lock it).
    INSERT INTO stall_nudge.held AS h (endpoint_id, queue, spent, created_at)
    SELECT r.endpoint_id, r.queue, r.spent, r.created_at
      FROM ranked r
     WHERE r.rank > $5
       AND NOT EXISTS (SELECT 1 FROM stall_nudge.held k
                        WHERE (md5(k.endpoint_id) = md5(r.endpoint_id::text) AND md5(k.queue) = md5(r.queue)
 AND k.endpoint_id = r.endpoint_id::text AND k.queue = r.queue)
                          AND (k.spent, k.created_at) = (r.spent, r.created_at))
    ON CONFLICT ((md5(endpoint_id)), (md5(queue)))
    DO UPDATE SET spent = EXCLUDED.spent, created_at = EXCLUDED.created_at
     WHERE (h.spent, h.created_at) <> (EXCLUDED.spent, EXCLUDED.created_at)
),
released AS (
    -- Every other pair judged leaves: it was charged, or is no longer due.
    DELETE FROM stall_nudge.held h
     USING found f
     WHERE (md5(h.endpoint_id) = md5(f.endpoint_id::text) AND md5(h.queue) = md5(f.queue)
 AND h.endpoint_id = f.endpoint_id::text AND h.queue = f.queue)
       AND (f.endpoint_id, f.queue) NOT IN (SELECT r.endpoint_id, r.queue FROM ranked r
                                             WHERE r.rank > $5)
)
-- What the tick did: each charge (with the todo it names; the title is read for these
-- few only, one probe each) in charge order, each drained pair, and how many pairs it judged. Reads
-- charged, ranked, drained and judged.
SELECT 'charge' AS kind, c.endpoint_id, c.queue, c.nudges, c.last_nudged_at,
       r.todo_id, r.created_at,
       (SELECT t.title FROM @todos t WHERE t.id = (json_populate_record(NULL::@todos, json_build_object('id', r.todo_id::text))).id) AS title, r.rank
  FROM charged c
  JOIN ranked r ON r.endpoint_id = c.endpoint_id AND r.queue = c.queue
UNION ALL
SELECT 'drain', x.endpoint_id, x.queue, NULL, NULL, NULL, NULL, NULL, NULL
  FROM drained x
UNION ALL
SELECT 'judged', NULL, NULL, (SELECT count(*) FROM judged)::int, NULL, NULL, NULL, NULL, NULL
ORDER BY 1, 9

-- statement: pair_status
-- pair_status: find_every_pair + count_pending + find_unreadable + status
WITH RECURSIVE
-- The full pass: every pair with a pending todo, a ledger row or a held entry. Its cost
-- follows pairs, not todos: a skip scan of the pending index, each step one descent to
-- the next pair's first entry (its head: the oldest pending todo), read with its row.
-- The judging part reads each head in the same snapshot, so it is current. Defines heads
-- and found.
heads AS (
    (SELECT t.endpoint_id, t.queue, t.created_at, t.id, t.delivery_id FROM @todos t
      WHERE t.state = 'pending' AND (octet_length(t.endpoint_id::text) + octet_length(t.queue) <= 2000)
      ORDER BY t.endpoint_id, t.queue, t.created_at
      LIMIT 1)
    UNION ALL
    SELECT n.*
      FROM heads p
     CROSS JOIN LATERAL (SELECT t.endpoint_id, t.queue, t.created_at, t.id, t.delivery_id
                           FROM @todos t
                          WHERE t.state = 'pending' AND (octet_length(t.endpoint_id::text) + octet_length(t.queue) <= 2000)
                            AND (t.endpoint_id, t.queue) > (p.endpoint_id, p.queue)
                          ORDER BY t.endpoint_id, t.queue, t.created_at
                          LIMIT 1) n
),
found AS (
    -- A head is the pair's work when it passes the gate, was created at a readable
    -- instant and no other pending todo has its instant (ties go by id: an index-only
    -- count), and the pair is not quarantined.
    SELECT h.endpoint_id::text AS endpoint_id, h.queue, h.endpoint_id AS key,
           CASE WHEN (h.delivery_id IS NULL
 OR (EXISTS (SELECT 1 FROM @deliveries gate_d WHERE gate_d.id = h.delivery_id)
     AND NOT EXISTS (SELECT 1 FROM @deliveries gate_u
                      WHERE gate_u.id = h.delivery_id AND NOT gate_u.verified))) AND (h.created_at > '0001-01-01 00:00:00+00'::timestamptz
 AND h.created_at < '9999-12-31 23:59:59.999999+00'::timestamptz)
                     AND (SELECT count(*)
                            FROM (SELECT 1 FROM @todos x
                                   WHERE x.endpoint_id = h.endpoint_id AND x.queue = h.queue
                                     AND x.state = 'pending' AND x.created_at = h.created_at
                                   LIMIT 2) x) = 1
                THEN h.id::text END AS head,
           h.created_at AS head_at
      FROM heads h
    UNION ALL
    -- Pairs the skip scan does not reach: long names, and ledger rows and held entries
    -- with no pending todo.
    SELECT o.endpoint_id, o.queue, (json_populate_record(NULL::@endpoints, json_build_object('id', o.endpoint_id::text))).id, NULL, NULL
      FROM (SELECT t.endpoint_id::text AS endpoint_id, t.queue FROM @todos t
             WHERE t.state = 'pending' AND NOT (octet_length(t.endpoint_id::text) + octet_length(t.queue) <= 2000)
            UNION
            SELECT r.endpoint_id, r.queue FROM @queue_stall_nudges r
            UNION
            SELECT h.endpoint_id, h.queue FROM stall_nudge.held h) o
     WHERE NOT EXISTS (SELECT 1 FROM heads h
                        WHERE h.endpoint_id::text = o.endpoint_id AND h.queue = o.queue)
),
-- Pending todos per pair, past the gate and held back by it: one pass over them.
-- Defines counts.
counts AS (
    SELECT p.endpoint_id::text AS endpoint_id, p.queue,
           count(*) FILTER (WHERE (p.delivery_id IS NULL
 OR (EXISTS (SELECT 1 FROM @deliveries gate_d WHERE gate_d.id = p.delivery_id)
     AND NOT EXISTS (SELECT 1 FROM @deliveries gate_u
                      WHERE gate_u.id = p.delivery_id AND NOT gate_u.verified)))) AS gated,
           count(*) FILTER (WHERE NOT (p.delivery_id IS NULL
 OR (EXISTS (SELECT 1 FROM @deliveries gate_d WHERE gate_d.id = p.delivery_id)
     AND NOT EXISTS (SELECT 1 FROM @deliveries gate_u
                      WHERE gate_u.id = p.delivery_id AND NOT gate_u.verified)))) AS ungated
      FROM @todos p
     WHERE p.state = 'pending'
     GROUP BY p.endpoint_id, p.queue
),
-- mirrors stall_core.readable
-- Each pair's first todo (by id) holding an instant the sweep does not read: a pending
-- todo's created_at (not work; NULL where a host allows it), else any todo's claimed_at
-- (not progress), as PostgreSQL prints it. The judge never reads these; status shows
-- them. Range scans of the arrivals and claim-times indexes. Defines unreadable.
unreadable AS (
    SELECT DISTINCT ON (u.endpoint_id, u.queue)
           u.endpoint_id, u.queue, u.todo_id, u.column_name, u.value
      FROM (SELECT p.endpoint_id::text AS endpoint_id, p.queue, p.id::text AS todo_id,
                   'created_at' AS column_name, coalesce(p.created_at::text, 'NULL') AS value
              FROM @todos p
             WHERE p.state = 'pending'
               AND (p.created_at IS NULL OR NOT (p.created_at > '0001-01-01 00:00:00+00'::timestamptz
 AND p.created_at < '9999-12-31 23:59:59.999999+00'::timestamptz))
            UNION ALL
            SELECT c.endpoint_id::text, c.queue, c.id::text, 'claimed_at', c.claimed_at::text
              FROM @todos c
             WHERE c.claimed_at IS NOT NULL AND NOT (c.claimed_at > '0001-01-01 00:00:00+00'::timestamptz
 AND c.claimed_at < '9999-12-31 23:59:59.999999+00'::timestamptz)) u
     ORDER BY u.endpoint_id, u.queue, u.column_name <> 'created_at', u.todo_id COLLATE "C"
)
-- "Is my queue drained?": each pair found with the facts its verdict needs (the judging
-- part's rules; stall_core.pair_status turns them into the verdict), its covering
-- hooks' health, and its first value the sweep does not read. Reads found, counts and
-- unreadable. $1 is the quarantine queue's name.
SELECT f.endpoint_id, f.queue, coalesce(n.gated, 0) AS gated, coalesce(n.ungated, 0) AS ungated,
       w.id AS todo_id, w.created_at, t.title,
       EXISTS (SELECT 1 FROM @endpoints active_e WHERE active_e.id = f.key AND active_e.state = 'active') AS endpoint_active,
       EXISTS (SELECT 1 FROM @notify_hooks receiver_h
         WHERE (receiver_h.endpoint_id = f.key AND (receiver_h.queues IS NULL OR f.queue = ANY (receiver_h.queues))) AND receiver_h.enabled) AS has_receiver,
       coalesce((SELECT claimed_t.claimed_at FROM @todos claimed_t
           WHERE (octet_length(f.endpoint_id::text) + octet_length(f.queue) <= 2000)
             AND claimed_t.endpoint_id = f.key AND claimed_t.queue = f.queue
             AND claimed_t.claimed_at IS NOT NULL AND (octet_length(claimed_t.endpoint_id::text) + octet_length(claimed_t.queue) <= 2000)
             AND (claimed_t.claimed_at > '0001-01-01 00:00:00+00'::timestamptz
 AND claimed_t.claimed_at < '9999-12-31 23:59:59.999999+00'::timestamptz)
           ORDER BY claimed_t.claimed_at DESC
           LIMIT 1),
         (SELECT claimed_l.claimed_at FROM @todos claimed_l
           WHERE NOT (octet_length(f.endpoint_id::text) + octet_length(f.queue) <= 2000)
             AND (md5(claimed_l.endpoint_id::text) = md5(f.endpoint_id::text) AND md5(claimed_l.queue) = md5(f.queue)
 AND claimed_l.endpoint_id::text = f.endpoint_id::text AND claimed_l.queue = f.queue
 AND NOT (octet_length(claimed_l.endpoint_id::text) + octet_length(claimed_l.queue) <= 2000))
             AND claimed_l.claimed_at IS NOT NULL AND (claimed_l.claimed_at > '0001-01-01 00:00:00+00'::timestamptz
 AND claimed_l.claimed_at < '9999-12-31 23:59:59.999999+00'::timestamptz)
           ORDER BY claimed_l.claimed_at DESC
           LIMIT 1)) AS latest_claim,
       r.named_todo IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM @todos named_t
         WHERE named_t.id = (json_populate_record(NULL::@todos, json_build_object('id', r.named_todo::text))).id AND named_t.state = 'pending'
           AND named_t.endpoint_id = f.key AND named_t.queue = f.queue) AS named_departed,
       r.nudges, r.last_nudged_at, r.named_todo, r.progressed_at,
       h.hook_failures, h.hooks_disabled,
       u.todo_id AS unreadable_todo, u.column_name AS unreadable_column,
       u.value AS unreadable_value
  FROM found f
  LEFT JOIN counts n ON n.endpoint_id = f.endpoint_id AND n.queue = f.queue
  LEFT JOIN unreadable u ON u.endpoint_id = f.endpoint_id AND u.queue = f.queue
  LEFT JOIN LATERAL (SELECT f.head AS id, f.head_at AS created_at
 WHERE f.head IS NOT NULL AND f.queue <> $1
UNION ALL
SELECT o.id, o.created_at
  FROM (SELECT oldest_w.id, oldest_w.created_at
  FROM ((SELECT work_t.id::text AS id, work_t.created_at
           FROM @todos work_t
          WHERE f.queue <> $1 AND (octet_length(f.endpoint_id::text) + octet_length(f.queue) <= 2000)
            AND work_t.endpoint_id = f.key AND work_t.queue = f.queue
            AND work_t.state = 'pending' AND (octet_length(work_t.endpoint_id::text) + octet_length(work_t.queue) <= 2000)
            AND (work_t.created_at > '0001-01-01 00:00:00+00'::timestamptz
 AND work_t.created_at < '9999-12-31 23:59:59.999999+00'::timestamptz) AND (work_t.delivery_id IS NULL
 OR (EXISTS (SELECT 1 FROM @deliveries gate_d WHERE gate_d.id = work_t.delivery_id)
     AND NOT EXISTS (SELECT 1 FROM @deliveries gate_u
                      WHERE gate_u.id = work_t.delivery_id AND NOT gate_u.verified)))
          ORDER BY work_t.created_at, work_t.id::text COLLATE "C"
          LIMIT 1)
        UNION ALL
        (SELECT long_t.id::text, long_t.created_at
           FROM @todos long_t
          WHERE f.queue <> $1 AND NOT (octet_length(f.endpoint_id::text) + octet_length(f.queue) <= 2000)
            AND (md5(long_t.endpoint_id::text) = md5(f.endpoint_id::text) AND md5(long_t.queue) = md5(f.queue)
 AND long_t.endpoint_id::text = f.endpoint_id::text AND long_t.queue = f.queue
 AND NOT (octet_length(long_t.endpoint_id::text) + octet_length(long_t.queue) <= 2000))
            AND long_t.state = 'pending' AND (long_t.created_at > '0001-01-01 00:00:00+00'::timestamptz
 AND long_t.created_at < '9999-12-31 23:59:59.999999+00'::timestamptz)
            AND (long_t.delivery_id IS NULL
 OR (EXISTS (SELECT 1 FROM @deliveries gate_d WHERE gate_d.id = long_t.delivery_id)
     AND NOT EXISTS (SELECT 1 FROM @deliveries gate_u
                      WHERE gate_u.id = long_t.delivery_id AND NOT gate_u.verified)))
          ORDER BY long_t.created_at, long_t.id::text COLLATE "C"
          LIMIT 1)) oldest_w) o
 WHERE f.head IS NULL) w
    ON true
  LEFT JOIN @todos t ON t.id = (json_populate_record(NULL::@todos, json_build_object('id', w.id::text))).id
  LEFT JOIN @queue_stall_nudges r ON (md5(r.endpoint_id) = md5(f.endpoint_id::text) AND md5(r.queue) = md5(f.queue)
 AND r.endpoint_id = f.endpoint_id::text AND r.queue = f.queue)
 CROSS JOIN LATERAL (
        -- The most consecutive failures of an enabled covering hook, and how many
        -- covering hooks are disabled.
        SELECT coalesce(max(c.consecutive_failures) FILTER (WHERE c.enabled), 0) AS hook_failures,
               count(*) FILTER (WHERE NOT c.enabled) AS hooks_disabled
          FROM @notify_hooks c
         WHERE (c.endpoint_id = f.key AND (c.queues IS NULL OR f.queue = ANY (c.queues)))) h
 ORDER BY f.endpoint_id COLLATE "C", f.queue COLLATE "C"

