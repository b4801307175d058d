-- Queries of the Postgres ledger. Each query starts with a "-- name: NAME"
-- line and a one-line description; adapters/_sql.py loads them once, with every
-- {{rule(...)}} expanded from rules.sql, where each of the sweep's rules is written
-- once. Every policy number arrives as a parameter from PacingPolicy.

-- name: tick_lock
-- Take the fleet's tick lock for this transaction (or learn another instance holds it), then read the time.
-- $1 the tick lock's key, $2 statement and lock timeout (ms, as text), for the rest of this transaction.
-- The subquery (OFFSET 0 keeps it apart) runs first, so the clock is read after the lock is
-- held: a sweep's "now" is never earlier than the commit of the sweep before it.
-- Transaction-level only, so it works behind a transaction-pooling PgBouncer.
-- It also marks the transaction as a sweep's (its drains need no change logged), turns
-- JIT off (compiling a statement of a few index probes costs far more than running
-- it: the planner's row estimates for the change logs are guesses), and reads when
-- the fleet last ran a full pass. (The charging statement keeps PostgreSQL's custom
-- plans, about 2 ms of planning a tick: a generic plan, estimating thousands of due
-- pairs, hash-joins whole host tables.)
SELECT l.got, clock_timestamp() AS now,
       (SELECT s.full_pass_at FROM stall_nudge_sweeps s) AS full_pass_at
  FROM (SELECT set_config('statement_timeout', $2, true),
               set_config('lock_timeout', $2, true),
               set_config('stall_nudge.sweeping', 'on', true),
               set_config('jit', 'off', true),
               pg_try_advisory_xact_lock($1) AS got
        OFFSET 0) l;

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

-- name: charge_due
-- The full pass: judge every pair, charge (at most tick_limit, least-nudged first) and delete drained rows, in one statement.
-- $1 now, $2 threshold (µs), $3 backoff (µs[]), $4 cap, $5 tick_limit, $6 quarantine queue name.
-- Durations arrive as microseconds so no interval carries a days field: PostgreSQL
-- would add those as calendar days in the session time zone (25 h across DST).
--
-- The safety net under charge_changed, run at a bounded interval: it needs no record
-- of what changed. Cost follows pairs, not todos: one index descent per (endpoint_id, queue) with
-- pending work (the skip scan), whose first entry is already that pair's oldest
-- pending todo; then only cheap work per pair (the head's delivery, the ledger
-- row, and the claim log only for pairs that have a ledger row). See
-- docs/benchmarks.md.
WITH RECURSIVE heads_short AS (
    -- Skip scan over stall_nudge_todos_pending_short: one step per pair with a pending todo.
    -- The index orders a pair's entries oldest first, so each step's row is the
    -- pair's oldest pending todo (ties by id in "C" order, as the core breaks them).
    -- ~<~ / ~>~ are the byte-wise (text_pattern_ops) order the index is built in:
    -- each step checks the bound on every entry of the page it lands on, and a
    -- memcmp costs far less there than a locale-aware comparison.
    (SELECT t.endpoint_id::text AS endpoint_id, t.queue, t.created_at, t.id::text AS id,
            t.delivery_id
       FROM todos t
      WHERE t.state = 'pending' AND {{short_names(t)}}
      ORDER BY t.endpoint_id::text USING ~<~, t.queue USING ~<~, t.created_at,
               t.id::text COLLATE "C"
      LIMIT 1)
    UNION ALL
    SELECT nxt.endpoint_id, nxt.queue, nxt.created_at, nxt.id, nxt.delivery_id
      FROM heads_short h
     CROSS JOIN LATERAL (
            SELECT t.endpoint_id::text AS endpoint_id, t.queue, t.created_at, t.id::text AS id,
                   t.delivery_id
              FROM todos t
             WHERE t.state = 'pending' AND {{short_names(t)}}
               AND (t.endpoint_id::text, t.queue) ~>~ (h.endpoint_id, h.queue)
             ORDER BY t.endpoint_id::text USING ~<~, t.queue USING ~<~, t.created_at,
                      t.id::text COLLATE "C"
             LIMIT 1) nxt
),
heads_long AS (
    -- Each pair's oldest pending todo among those whose names are too long for the
    -- short index (rare): a scan of stall_nudge_todos_pending_long, which holds only them.
    SELECT DISTINCT ON (t.endpoint_id::text, t.queue)
           t.endpoint_id::text AS endpoint_id, t.queue, t.created_at, t.id::text AS id,
           t.delivery_id
      FROM todos t
     WHERE t.state = 'pending' AND {{long_names(t)}}
     ORDER BY t.endpoint_id::text, t.queue, t.created_at, t.id::text COLLATE "C"
),
heads AS (
    -- One head per pair. A pair with todos on both sides ("mixed") is searched whole below.
    SELECT s.*, (s.endpoint_id, s.queue) IN (SELECT l.endpoint_id, l.queue FROM heads_long l)
                AS mixed
      FROM heads_short s
    UNION ALL
    SELECT l.*, false
      FROM heads_long l
     WHERE (l.endpoint_id, l.queue) NOT IN (SELECT s.endpoint_id, s.queue FROM heads_short s)
),
gated AS (
    -- Does each head pass the sender gate? Quarantine is not work.
    SELECT h.endpoint_id, h.queue, h.id, h.created_at, h.mixed, {{passes_gate(h)}} AS passes
      FROM heads h
     WHERE h.queue <> $6
),
work AS (
    -- Each pair's oldest pending todo that passes the sender gate: the head itself,
    -- or, for a pair whose head does not pass (or a mixed pair), a search of the pair.
    SELECT g.endpoint_id, g.queue, g.id AS todo_id, g.created_at
      FROM gated g
     WHERE g.passes AND NOT g.mixed
    UNION ALL
    SELECT g.endpoint_id, g.queue, o.id, o.created_at
      FROM gated g
     CROSS JOIN LATERAL ({{oldest_work(g.endpoint_id, g.queue, $6)}}) o
     WHERE NOT g.passes OR g.mixed
),
work_rows AS (
    -- Each pair's work with its ledger row, if any.
    SELECT w.*, r.ctid AS row_ctid, r.nudges AS row_nudges, r.last_nudged_at
      FROM work w
      LEFT JOIN queue_stall_nudges r ON r.endpoint_id = w.endpoint_id AND r.queue = w.queue
),
judged AS (
    -- A full pass judges every held pair again.
    SELECT h.endpoint_id, h.queue FROM stall_nudge_held h
),
cut AS (
    -- ...and every change.
    SELECT NULL::timestamptz AS look_after
),
swept AS (
    -- The fleet's last full pass is now.
    INSERT INTO stall_nudge_sweeps AS s (full_pass_at) VALUES ($1)
    ON CONFLICT (singleton) DO UPDATE SET full_pass_at = EXCLUDED.full_pass_at
),
to_drain AS (
    -- Ledger rows whose pair has no gate-passing pending todo left. NOT IN (a hashed
    -- subplan; no column here is ever NULL) keeps this linear whatever the planner
    -- guesses about the size of "work".
    SELECT n.ctid AS row_ctid, n.endpoint_id, n.queue, n.nudges, n.last_nudged_at
      FROM queue_stall_nudges n
     WHERE (n.endpoint_id, n.queue) NOT IN (SELECT w.endpoint_id, w.queue FROM work w)
),
{{charge_judged()}}

-- name: anything_to_judge
-- Whether the usual tick has a pair to judge, run first: planning charge_changed costs
-- more than this whole test, and without a pair to judge it would only absorb claims.
-- $1..$4 as charge_due. Each branch is one source of charge_changed's pairs: a claim of
-- a pair with a ledger row (progress, a drain), a pair held back, a change past the
-- threshold (an endpoint's included), a ledger row whose backoff ended (a range scan
-- per count). When there is none, every claim is of a pair with no ledger row, and it is
-- absorbed here as charge_changed would: a busy host's claims need no judging of their
-- own (a pair with no ledger row and no held entry has its work behind changes in the
-- log). The snapshot is taken after the tick read the clock: it sees every commit before "now".
WITH judge AS (
    -- OFFSET 0: one probe of the ledger's pair index per claim, never a hash of the ledger.
    SELECT EXISTS (SELECT 1 FROM stall_nudge_claims c
                    WHERE EXISTS (SELECT 1 FROM queue_stall_nudges n
                                   WHERE {{pair_is(n, c.endpoint_id, c.queue)}} OFFSET 0))
        OR EXISTS (SELECT 1 FROM stall_nudge_held)
        OR EXISTS (SELECT 1 FROM stall_nudge_changes x WHERE {{stalled(x.look_after, $1, $2)}})
        OR EXISTS (SELECT 1
                     FROM generate_series(0, $4 - 1) AS s (nudges)
                    WHERE EXISTS (SELECT 1 FROM queue_stall_nudges r
                                   WHERE r.nudges = s.nudges
                                     AND {{backoff_ended(s.nudges, r.last_nudged_at, $1, $3)}}))
           AS judge
),
absorbed AS (
    DELETE FROM stall_nudge_claims c WHERE NOT (SELECT j.judge FROM judge j)
)
SELECT j.judge FROM judge j;

-- name: charge_changed
-- The usual tick: judge only the pairs that changed, charge and delete drained rows, in one statement.
-- $1..$6 as charge_due. The pairs judged: those with an unabsorbed claim, of a
-- reconfigured endpoint, with a ledger row whose backoff ended, the best tick_limit
-- of the pairs an earlier tick held back, and those of the pair changes past the
-- threshold up to the cut (see "walk"). Each is judged on the current rows, by the
-- same rules as the full pass. Run only when anything_to_judge finds a pair to judge;
-- a storm of changes costs about what it charges.
--
-- Why the cut is enough: a pair change's look_after is at or before the oldest work
-- it can give its pair (the todo's created_at; for a ledger row deleted by hand, the
-- pair's oldest pending todo past the gate then), and a pair with no ledger row and no held entry
-- has all its work behind changes still in the log. So no pair left unjudged ranks
-- ahead of (0 nudges spent, work as old as the first change past the cut). The walk
-- stops once tick_limit pairs it judged rank ahead of that, so they, or pairs that
-- rank ahead of them, are what the tick charges: the same as judging every change.
-- It also stops when the changes or its steps run out; then every change is judged.
WITH RECURSIVE walk (look_after, next, pairs, ages, steps) AS (
    -- Pair changes past the threshold, one instant at a time, oldest first. Each step
    -- judges the pairs changed at that instant and keeps those due a first nudge
    -- (no ledger row), with the age of their oldest work; "next" is the next instant.
    -- The first row only names the first instant.
    SELECT NULL::timestamptz, g.look_after, '{}'::text[], '{}'::timestamptz[], 0
      FROM (SELECT min(x.look_after) AS look_after FROM stall_nudge_changes x
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
last_step AS MATERIALIZED (
    SELECT w.look_after, {{walk_filled(w.pairs, w.ages, w.next, $5)}} AS filled
      FROM walk w
     ORDER BY w.steps DESC
     LIMIT 1
),
cut AS (
    -- The last instant judged, if the walk filled the tick limit; otherwise no cut:
    -- every change is judged.
    SELECT s.look_after FROM last_step s WHERE s.filled
),
reconfigured AS (
    -- Endpoints whose state, hooks or deliveries' verification changed.
    SELECT DISTINCT x.endpoint_id FROM stall_nudge_changes x
     WHERE x.queue IS NULL AND {{stalled(x.look_after, $1, $2)}}
),
changed AS (
    SELECT c.endpoint_id, c.queue FROM stall_nudge_claims c
    UNION
    SELECT x.endpoint_id, x.queue FROM stall_nudge_changes x
     WHERE x.queue IS NOT NULL AND {{stalled(x.look_after, $1, $2)}}
       AND {{within_cut(x.look_after)}}
    UNION
    -- Every pair of a reconfigured endpoint: its pending todos' queues (on both sides
    -- of the pending index), its ledger rows.
    SELECT e.endpoint_id, q.queue
      FROM reconfigured e
     CROSS JOIN LATERAL (SELECT DISTINCT t.queue FROM todos t
                          WHERE t.endpoint_id::text = e.endpoint_id AND t.state = 'pending'
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
    UNION
    SELECT r.endpoint_id, r.queue
      FROM generate_series(0, $4 - 1) AS s (nudges)
     CROSS JOIN LATERAL (
            -- OFFSET 0 keeps this a range scan per count, never a scan of the ledger.
            SELECT r.endpoint_id, r.queue FROM queue_stall_nudges r
             WHERE r.nudges = s.nudges
               AND {{backoff_ended(s.nudges, r.last_nudged_at, $1, $3)}}
            OFFSET 0) r
),
walked AS (
    -- Held pairs change only through what "changed" lists (a claim, a change), so
    -- the rest keep their order: the best tick_limit of them are all a tick can charge.
    SELECT h.endpoint_id, h.queue
      FROM stall_nudge_held h
     WHERE (h.endpoint_id, h.queue) NOT IN (SELECT c.endpoint_id, c.queue FROM changed c)
     ORDER BY h.created_at, h.endpoint_id COLLATE "C", h.queue COLLATE "C"
     LIMIT $5
),
judged AS (
    SELECT * FROM changed UNION ALL SELECT * FROM walked
),
judged_rows AS (
    -- Each judged pair with its oldest work and its ledger row, either possibly absent.
    -- Every lookup is one index descent per pair (LIMIT 1 keeps each a nested loop,
    -- whatever the planner guesses about the sizes of the logs).
    SELECT j.endpoint_id, j.queue, o.id AS todo_id, o.created_at,
           r.ctid AS row_ctid, r.nudges AS row_nudges, r.last_nudged_at
      FROM judged j
      LEFT JOIN LATERAL ({{oldest_work(j.endpoint_id, j.queue, $6)}}) o ON true
      LEFT JOIN LATERAL (SELECT r.ctid, r.nudges, r.last_nudged_at
                           FROM queue_stall_nudges r
                          WHERE {{pair_is(r, j.endpoint_id, j.queue)}}
                          LIMIT 1) r ON true
),
work_rows AS (
    SELECT * FROM judged_rows WHERE todo_id IS NOT NULL
),
to_drain AS (
    SELECT j.row_ctid, j.endpoint_id, j.queue, j.row_nudges AS nudges, j.last_nudged_at
      FROM judged_rows j
     WHERE j.todo_id IS NULL AND j.row_ctid IS NOT NULL
),
{{charge_judged()}}

-- name: backlog
-- Whether a log holds at least $3 rows a tick would read: then the tick compacts the logs first, a range at a time.
-- $1 now, $2 threshold (µs), $3 rows. A sweeper outage leaves the logs holding every
-- claim and arrival since; one statement reading them all may not finish within the
-- tick's timeout, and a tick rolled back leaves them to grow. A log smaller than 28
-- bytes a row (a heap row's header and line pointer) cannot hold $3 rows and is not
-- counted: a tick in a storm of changes reads a few of them, not all.
SELECT CASE WHEN pg_relation_size('stall_nudge_claims') >= $3 * 28
            THEN (SELECT count(*) FROM (SELECT 1 FROM stall_nudge_claims LIMIT $3) c) >= $3
            ELSE false END
    OR CASE WHEN pg_relation_size('stall_nudge_changes') >= $3 * 28
            THEN (SELECT count(*)
                    FROM (SELECT 1 FROM stall_nudge_changes x
                           WHERE {{stalled(x.look_after, $1, $2)}} LIMIT $3) x) >= $3
            ELSE false END;

-- name: log_blocks
-- How many blocks a log has ($1 its name): the compaction goes through them a range at a time.
SELECT pg_relation_size($1::regclass) / current_setting('block_size')::bigint;

-- name: compact_claims
-- Compact the claims in the log's blocks from tid $1 up to $2: delete those no tick will read.
-- What every charge does to the claims it sees (claim_superseded, as in absorbed in
-- charge_judged). Behind the tick lock no charge writes a ledger row meanwhile.
DELETE FROM stall_nudge_claims c
 USING (SELECT k.ctid AS at, {{claim_rank(k)}} AS newest
          FROM stall_nudge_claims k
         WHERE k.ctid >= $1::tid AND k.ctid < $2::tid) k
 WHERE c.ctid = k.at AND {{claim_superseded(k.newest, c)}};

-- name: compact_changes
-- Collapse the changes past the threshold in the log's blocks from tid $3 up to $4: of each pair's (or endpoint's), keep the oldest.
-- $1 now, $2 threshold (µs). A tick judges a pair on the current rows at its oldest
-- change past the threshold that its cut reaches; a later one past the threshold
-- bounds no work the oldest does not, so it would only have the pair judged again.
-- Changes within the threshold wait for their own time: each stays.
DELETE FROM stall_nudge_changes x
 USING (SELECT k.ctid AS at,
               row_number() OVER (PARTITION BY k.endpoint_id, k.queue
                                  ORDER BY k.look_after, k.ctid) AS oldest
          FROM stall_nudge_changes k
         WHERE k.ctid >= $3::tid AND k.ctid < $4::tid
           AND {{stalled(k.look_after, $1, $2)}}) k
 WHERE x.ctid = k.at AND k.oldest > 1;

-- name: now
-- The database's clock, the time authority every decision is measured on.
SELECT clock_timestamp();

-- name: ledger_rows
-- Every ledger row, for inspection and status.
SELECT endpoint_id, queue, nudges, last_nudged_at FROM queue_stall_nudges;

-- name: pair_status
-- Every pair with a pending todo or a ledger row, with what "is my queue drained?" needs.
-- The same rules as charge_due decide what each column says; stall_core.pair_status
-- turns them into the verdict.
WITH pairs AS (
    SELECT endpoint_id::text AS endpoint_id, queue FROM todos WHERE state = 'pending'
    UNION
    SELECT endpoint_id, queue FROM queue_stall_nudges
),
counts AS (
    SELECT t.endpoint_id::text AS endpoint_id, t.queue,
           count(*) FILTER (WHERE {{passes_gate(t)}}) AS gated,
           count(*) FILTER (WHERE NOT {{passes_gate(t)}}) AS ungated
      FROM todos t
     WHERE t.state = 'pending'
     GROUP BY t.endpoint_id::text, t.queue
)
SELECT p.endpoint_id, p.queue,
       coalesce(c.gated, 0) AS gated,
       coalesce(c.ungated, 0) AS ungated,
       o.id AS todo_id, o.created_at, o.title,
       {{endpoint_active(p.endpoint_id)}} AS endpoint_active,
       {{has_receiver(p.endpoint_id, p.queue)}} AS has_receiver,
       {{unabsorbed_claim_at(p.endpoint_id, p.queue)}} AS unabsorbed_claim_at,
       r.nudges, r.last_nudged_at, h.hook_failures, h.hooks_disabled
  FROM pairs p
  LEFT JOIN counts c ON c.endpoint_id = p.endpoint_id AND c.queue = p.queue
  LEFT JOIN queue_stall_nudges r ON r.endpoint_id = p.endpoint_id AND r.queue = p.queue
  CROSS JOIN LATERAL (
        -- The health of the hooks whose queue filter covers the pair: the most consecutive
        -- failures of an enabled one, and how many are disabled.
        SELECT coalesce(max(k.consecutive_failures) FILTER (WHERE k.enabled), 0) AS hook_failures,
               count(*) FILTER (WHERE NOT k.enabled) AS hooks_disabled
          FROM notify_hooks k
         WHERE k.endpoint_id::text = p.endpoint_id AND (k.queues IS NULL OR p.queue = ANY (k.queues))) h
  LEFT JOIN LATERAL (
        -- The pair's oldest gate-passing pending todo: a descent of each side of the index.
        SELECT o.id, o.created_at, o.title
          FROM ((SELECT t.id::text AS id, t.created_at, t.title
                   FROM todos t
                  WHERE t.endpoint_id::text = p.endpoint_id AND t.queue = p.queue
                    AND t.state = 'pending' AND {{short_names(t)}} AND {{passes_gate(t)}}
                  ORDER BY t.created_at, t.id::text COLLATE "C"
                  LIMIT 1)
                UNION ALL
                (SELECT t.id::text, t.created_at, t.title
                   FROM todos t
                  WHERE {{long_pair(t, p.endpoint_id, p.queue)}}
                    AND t.state = 'pending' AND {{long_names(t)}} AND {{passes_gate(t)}}
                  ORDER BY t.created_at, t.id::text COLLATE "C"
                  LIMIT 1)) o
         ORDER BY o.created_at, o.id COLLATE "C"
         LIMIT 1) o ON true
 ORDER BY p.endpoint_id COLLATE "C", p.queue COLLATE "C";
