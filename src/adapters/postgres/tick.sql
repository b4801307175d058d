-- The parts a tick's one statement is built from. A finding part says which pairs
-- this kind of tick judges; the judging part judges them on the current rows and
-- charges; in the incremental footprint a last part keeps the hints the next usual
-- tick finds its pairs by; the report returns what was done. adapters.postgres._ledger
-- (TICKS) names the parts of each statement, and expanded/ holds every statement as it
-- runs (stall-nudge sql prints them).
--
-- A part is a list of CTEs, or the final SELECT. Each says which CTEs it reads and
-- which it defines. Between them: found (endpoint_id, queue), the pairs to judge, by
-- their text form, each once, defined by the finding parts; cut (look_after), the
-- last change a usual tick judged (no row: every change), defined by the finding
-- parts of the incremental footprint; and judged, ranked, charged, due, drained,
-- defined by the judging part. Parameters, the same in every part: $1 now, $2
-- threshold (µs), $3 backoff (µs[]), $4 cap, $5 tick_limit, $6 quarantine queue name.
-- Durations arrive as microseconds so no interval carries a days field (PostgreSQL
-- would add those as calendar days in the session time zone).

-- part: find_every_pair
-- The full pass: every pair with a pending todo, with a ledger row, or held back.
-- Defines found and cut (none: a full pass judges every change). Cost follows pairs,
-- not todos: one descent of the pending index per pair with pending work (a skip
-- scan: each step asks for the first entry past the pair before).
pending_pairs AS (
    (SELECT t.endpoint_id, t.queue FROM todos t
      WHERE t.state = 'pending' AND {{short_names(t)}}
      ORDER BY t.endpoint_id, t.queue
      LIMIT 1)
    UNION ALL
    SELECT n.endpoint_id, n.queue
      FROM pending_pairs p
     CROSS JOIN LATERAL (SELECT t.endpoint_id, t.queue FROM todos t
                          WHERE t.state = 'pending' AND {{short_names(t)}}
                            AND (t.endpoint_id, t.queue) > (p.endpoint_id, p.queue)
                          ORDER BY t.endpoint_id, t.queue
                          LIMIT 1) n
),
found AS (
    SELECT p.endpoint_id::text AS endpoint_id, p.queue FROM pending_pairs p
    UNION
    -- Pairs whose names are too long for the pending index: rare, their own index.
    SELECT t.endpoint_id::text, t.queue FROM todos t
     WHERE t.state = 'pending' AND {{long_names(t)}}
    UNION
    SELECT r.endpoint_id, r.queue FROM queue_stall_nudges r
    UNION
    SELECT h.endpoint_id, h.queue FROM stall_nudge.held h
),
cut AS (
    SELECT NULL::timestamptz AS look_after WHERE false
)

-- part: find_changed
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
             WHERE x.queue IS NOT NULL AND {{stalled(x.look_after, $1, $2)}}) g
     WHERE g.look_after IS NOT NULL
    UNION ALL
    SELECT w.next, n.look_after, w.pairs || j.pairs, w.ages || j.ages, w.steps + 1
      FROM walk w
     CROSS JOIN LATERAL ({{changes_after(w.next, $1, $2)}}) n
     CROSS JOIN LATERAL ({{first_nudges_at(w.next, $1, $2, $6)}}) j
     WHERE w.next IS NOT NULL AND w.steps < {{walk_steps($5)}}
       AND NOT {{walk_filled(w.pairs, w.ages, w.next, $5)}}
),
cut AS (
    -- The last instant judged, if the walk filled the tick limit; otherwise no cut.
    SELECT s.look_after
      FROM (SELECT w.look_after, {{walk_filled(w.pairs, w.ages, w.next, $5)}} AS filled
              FROM walk w
             ORDER BY w.steps DESC
             LIMIT 1) s
     WHERE s.filled
),
reconfigured AS (
    -- Endpoints whose state, hooks or deliveries' verification changed.
    SELECT DISTINCT x.endpoint_id, {{endpoint_key(x.endpoint_id)}} AS key
      FROM stall_nudge.changes x
     WHERE x.queue IS NULL AND {{stalled(x.look_after, $1, $2)}}
),
changed AS (
    SELECT c.endpoint_id, c.queue FROM stall_nudge.claims c
    UNION
    SELECT x.endpoint_id, x.queue FROM stall_nudge.changes x
     WHERE x.queue IS NOT NULL AND {{stalled(x.look_after, $1, $2)}}
       AND x.look_after <= coalesce((SELECT c.look_after FROM cut c), 'infinity')
    UNION
    -- Every pair of a reconfigured endpoint: its pending todos' queues (on both sides
    -- of the pending index) and its ledger rows.
    SELECT e.endpoint_id, q.queue
      FROM reconfigured e
     CROSS JOIN LATERAL (SELECT DISTINCT t.queue FROM todos t
                          WHERE t.endpoint_id = e.key AND t.state = 'pending'
                            AND {{short_names(t)}}) q
    UNION
    SELECT e.endpoint_id, q.queue
      FROM reconfigured e
     CROSS JOIN LATERAL (SELECT DISTINCT t.queue FROM todos t
                          WHERE md5(t.endpoint_id::text) = md5(e.endpoint_id)
                            AND t.endpoint_id::text = e.endpoint_id AND t.state = 'pending'
                            AND {{long_names(t)}}) q
    UNION
    SELECT e.endpoint_id, n.queue
      FROM reconfigured e
     CROSS JOIN LATERAL (SELECT DISTINCT n.queue FROM queue_stall_nudges n
                          WHERE md5(n.endpoint_id) = md5(e.endpoint_id)
                            AND n.endpoint_id = e.endpoint_id) n
)

-- part: find_backoff_ended
-- The ledger rows whose backoff ended: one range scan of stall_nudge_ledger_due per
-- count below the cap (OFFSET 0 keeps each a range scan, never a scan of the ledger).
-- Defines backoff_ended.
backoff_ended AS (
    SELECT r.endpoint_id, r.queue
      FROM generate_series(0, $4 - 1) AS s (nudges)
     CROSS JOIN LATERAL (SELECT r.endpoint_id, r.queue FROM queue_stall_nudges r
                          WHERE r.nudges = s.nudges
                            AND {{backoff_ended(s.nudges, r.last_nudged_at, $1, $3)}}
                         OFFSET 0) r
)

-- part: find_held
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
)

-- part: judge
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
     CROSS JOIN LATERAL (SELECT {{endpoint_key(f.endpoint_id)}} AS key) k
      LEFT JOIN LATERAL ({{oldest_work(k.key, f.endpoint_id, f.queue, $6)}}) w ON true
      LEFT JOIN LATERAL (SELECT r.ctid, r.nudges, r.last_nudged_at
                           FROM queue_stall_nudges r
                          WHERE {{pair_is(r, f.endpoint_id, f.queue)}}
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
            SELECT {{stalled(j.created_at, $1, $2)}}
                   AND {{endpoint_active(j.key)}}
                   AND {{has_receiver(j.key, j.queue)}} AS candidate) c
     CROSS JOIN LATERAL (
            SELECT GREATEST({{logged_claim_at(j.endpoint_id, j.queue)}},
                            CASE WHEN j.row_ctid IS NOT NULL
                                 THEN {{claimed_after(j.key, j.endpoint_id, j.queue, j.last_nudged_at)}}
                            END) AS progress_at) p
     WHERE j.todo_id IS NOT NULL
),
ranked AS (
    -- Every due pair, ranked in charge order.
    SELECT a.*,
           row_number() OVER (ORDER BY {{charge_order(a.spent, a.created_at, a.endpoint_id, a.queue)}}) AS rank
      FROM assessed a
     WHERE a.candidate AND (a.fresh OR {{backoff_over(a.spent, a.last_nudged_at, $1, $3, $4)}})
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
     USING (SELECT k.ctid AS at, {{claim_rank(k)}} AS newest FROM stall_nudge.claims k) k
     WHERE c.ctid = k.at
       AND ({{claim_superseded(k.newest, c)}}
            OR EXISTS (SELECT 1 FROM charged x
                        WHERE x.endpoint_id = c.endpoint_id AND x.queue = c.queue)
            OR EXISTS (SELECT 1 FROM drained x
                        WHERE x.endpoint_id = c.endpoint_id AND x.queue = c.queue)
            OR EXISTS (SELECT 1 FROM reset x
                        WHERE x.endpoint_id = c.endpoint_id AND x.queue = c.queue))
)

-- part: keep_hints
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
                                  WHERE {{pair_is(k, f.endpoint_id, f.queue)}}
                                  LIMIT 1) k
             WHERE (f.endpoint_id, f.queue) NOT IN (SELECT b.endpoint_id, b.queue
                                                      FROM held_back b)))
),
looked AS (
    -- Every change past the threshold up to the cut has had its pair judged. Changes
    -- still within the threshold wait for their time, those past the cut for a later tick.
    DELETE FROM stall_nudge.changes x
     WHERE {{stalled(x.look_after, $1, $2)}}
       AND (x.queue IS NULL
            OR x.look_after <= coalesce((SELECT c.look_after FROM cut c), 'infinity'))
)

-- part: report
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

-- part: count_pending
-- Pending todos per pair, past the gate and held back by it: one pass over them.
-- Defines counts.
counts AS (
    SELECT p.endpoint_id::text AS endpoint_id, p.queue,
           count(*) FILTER (WHERE {{passes_gate(p)}}) AS gated,
           count(*) FILTER (WHERE NOT {{passes_gate(p)}}) AS ungated
      FROM todos p
     WHERE p.state = 'pending'
     GROUP BY p.endpoint_id, p.queue
)

-- part: status
-- "Is my queue drained?": each pair found with the facts its verdict needs, read by
-- the judging part's rules (stall_core.pair_status turns them into the verdict), and
-- its covering hooks' health. Reads found and counts. $1 is the quarantine queue's name.
SELECT f.endpoint_id, f.queue, coalesce(n.gated, 0) AS gated, coalesce(n.ungated, 0) AS ungated,
       w.id AS todo_id, w.created_at, t.title,
       {{endpoint_active(k.key)}} AS endpoint_active,
       {{has_receiver(k.key, f.queue)}} AS has_receiver,
       GREATEST({{logged_claim_at(f.endpoint_id, f.queue)}},
                CASE WHEN r.nudges IS NOT NULL
                     THEN {{claimed_after(k.key, f.endpoint_id, f.queue, r.last_nudged_at)}}
                END) AS progress_at,
       r.nudges, r.last_nudged_at, h.hook_failures, h.hooks_disabled
  FROM found f
 CROSS JOIN LATERAL (SELECT {{endpoint_key(f.endpoint_id)}} AS key) k
  LEFT JOIN counts n ON n.endpoint_id = f.endpoint_id AND n.queue = f.queue
  LEFT JOIN LATERAL ({{oldest_work(k.key, f.endpoint_id, f.queue, $1)}}) w ON true
  LEFT JOIN todos t ON t.id = w.todo
  LEFT JOIN queue_stall_nudges r ON {{pair_is(r, f.endpoint_id, f.queue)}}
 CROSS JOIN LATERAL (
        -- The most consecutive failures of an enabled covering hook, and how many
        -- covering hooks are disabled.
        SELECT coalesce(max(c.consecutive_failures) FILTER (WHERE c.enabled), 0) AS hook_failures,
               count(*) FILTER (WHERE NOT c.enabled) AS hooks_disabled
          FROM notify_hooks c
         WHERE c.endpoint_id = k.key AND (c.queues IS NULL OR f.queue = ANY (c.queues))) h
 ORDER BY f.endpoint_id COLLATE "C", f.queue COLLATE "C"
