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
SELECT l.got, clock_timestamp() AS now
  FROM (SELECT set_config('statement_timeout', $2, true),
               set_config('lock_timeout', $2, true),
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
UPDATE queue_stall_nudges
   SET nudges = nudges - 1
 WHERE endpoint_id = $1 AND queue = $2 AND nudges = $3 AND last_nudged_at = $4
RETURNING nudges;

-- name: charge_due
-- Decide, charge (at most tick_limit, least-nudged first) and delete drained rows, in one statement.
-- $1 now, $2 threshold (µs), $3 backoff (µs[]), $4 cap, $5 tick_limit, $6 quarantine queue name.
-- Durations arrive as microseconds so no interval carries a days field: PostgreSQL
-- would add those as calendar days in the session time zone (25 h across DST).
--
-- Cost follows pairs, not todos: one index descent per (endpoint_id, queue) with
-- pending work (the skip scan), whose first entry is already that pair's oldest
-- pending todo; then only cheap work per pair (the head's delivery, the ledger
-- row, and the claim log only for pairs that have a ledger row). See
-- docs/benchmarks.md.
WITH RECURSIVE heads AS (
    -- Skip scan over stall_nudge_todos_pending: one step per pair with a pending todo.
    -- The index orders a pair's entries oldest first, so each step's row is the
    -- pair's oldest pending todo (ties by id in "C" order, as the core breaks them).
    -- ~<~ / ~>~ are the byte-wise (text_pattern_ops) order the index is built in:
    -- each step checks the bound on every entry of the page it lands on, and a
    -- memcmp costs far less there than a locale-aware comparison.
    (SELECT t.endpoint_id, t.queue, t.created_at, t.id, t.delivery_id
       FROM todos t
      WHERE t.state = 'pending'
      ORDER BY t.endpoint_id USING ~<~, t.queue USING ~<~, t.created_at, t.id COLLATE "C"
      LIMIT 1)
    UNION ALL
    SELECT nxt.endpoint_id, nxt.queue, nxt.created_at, nxt.id, nxt.delivery_id
      FROM heads h
     CROSS JOIN LATERAL (
            SELECT t.endpoint_id, t.queue, t.created_at, t.id, t.delivery_id
              FROM todos t
             WHERE t.state = 'pending'
               AND (t.endpoint_id, t.queue) ~>~ (h.endpoint_id, h.queue)
             ORDER BY t.endpoint_id USING ~<~, t.queue USING ~<~, t.created_at, t.id COLLATE "C"
             LIMIT 1) nxt
),
gated AS (
    -- Does each head pass the sender gate? Quarantine is not work.
    SELECT h.endpoint_id, h.queue, h.id, h.created_at, {{passes_gate(h)}} AS passes
      FROM heads h
     WHERE h.queue <> $6
),
work AS (
    -- Each pair's oldest pending todo that passes the sender gate: the head itself,
    -- or, for a pair whose head does not pass, a search of the pair.
    SELECT g.endpoint_id, g.queue, g.id AS todo_id, g.created_at
      FROM gated g
     WHERE g.passes
    UNION ALL
    SELECT g.endpoint_id, g.queue, o.id, o.created_at
      FROM gated g
     CROSS JOIN LATERAL (
            SELECT t.id, t.created_at
              FROM todos t
             WHERE t.endpoint_id = g.endpoint_id AND t.queue = g.queue
               AND {{is_work(t, $6)}}
             ORDER BY t.created_at, t.id COLLATE "C"
             LIMIT 1) o
     WHERE NOT g.passes
),
stale AS (
    -- Ledger rows whose pair has no gate-passing pending todo left. NOT IN (a hashed
    -- subplan; no column here is ever NULL) keeps this linear whatever the planner
    -- guesses about the size of "work".
    SELECT n.endpoint_id, n.queue, n.nudges, n.last_nudged_at
      FROM queue_stall_nudges n
     WHERE (n.endpoint_id, n.queue) NOT IN (SELECT w.endpoint_id, w.queue FROM work w)
),
drained AS (
    -- Matching nudges and last_nudged_at re-checks the locked row: a row another
    -- sweeper charged since our snapshot is not deleted.
    DELETE FROM queue_stall_nudges n
     USING stale s
     WHERE n.endpoint_id = s.endpoint_id AND n.queue = s.queue
       AND n.nudges = s.nudges AND n.last_nudged_at = s.last_nudged_at
    RETURNING n.endpoint_id, n.queue
),
candidate AS MATERIALIZED (
    -- Stalled: past the threshold, endpoint active, an enabled hook covering the queue.
    -- Those cheap tests come first; the progress probe runs once, only for pairs with
    -- a ledger row. "fresh": nudge 1 is due at once (no row, or progress). Otherwise
    -- the row's count stands, 0 only for a refunded first nudge.
    SELECT w.endpoint_id, w.queue, w.todo_id, w.created_at, p.fresh,
           CASE WHEN p.fresh THEN 0 ELSE r.nudges END AS spent,
           r.nudges AS row_nudges, r.last_nudged_at
      FROM work w
      LEFT JOIN queue_stall_nudges r ON r.endpoint_id = w.endpoint_id AND r.queue = w.queue
     CROSS JOIN LATERAL (SELECT {{starts_over(r)}} AS fresh) p
     WHERE {{stalled(w.created_at, $1, $2)}}
       AND {{endpoint_active(w.endpoint_id)}}
       AND {{has_receiver(w.endpoint_id, w.queue)}}
),
due AS (
    -- The best tick_limit due pairs, in charge order; the inner ORDER BY ... LIMIT is a
    -- top-N sort, so a storm of due pairs is never sorted whole. The stamp is now, or
    -- the latest claim this charge absorbs if later, so every absorbed claim is at or
    -- before it.
    SELECT c.*,
           GREATEST($1::timestamptz, {{unabsorbed_claim_at(c.endpoint_id, c.queue)}}) AS stamp,
           row_number() OVER (ORDER BY {{charge_order(c.spent, c.created_at, c.endpoint_id, c.queue)}}) AS rank
      FROM (SELECT c.*
              FROM candidate c
             WHERE c.fresh OR {{backoff_over(c.spent, c.last_nudged_at, $1, $3, $4)}}
             ORDER BY {{charge_order(c.spent, c.created_at, c.endpoint_id, c.queue)}}
             LIMIT $5) c
),
inserted AS (
    -- A pair with no row in this snapshot gets nudge 1. A row that appeared since (an
    -- older build sweeping without the tick lock, during a deploy) is a conflict:
    -- nothing is charged for the pair this tick.
    INSERT INTO queue_stall_nudges AS n (endpoint_id, queue, nudges, last_nudged_at)
    SELECT d.endpoint_id, d.queue, d.spent + 1, d.stamp
      FROM due d
     WHERE d.row_nudges IS NULL
    ON CONFLICT (endpoint_id, queue) DO NOTHING
    RETURNING n.endpoint_id, n.queue, n.nudges, n.last_nudged_at
),
advanced AS (
    -- Compare-and-set on the row as locked: it must still be the row this snapshot
    -- decided on (same count and stamp). Behind the tick lock (refunds take it too) it
    -- always is; a row an older build charged or deleted since is left alone.
    UPDATE queue_stall_nudges n
       SET nudges = d.spent + 1, last_nudged_at = d.stamp
      FROM due d
     WHERE d.endpoint_id = n.endpoint_id AND d.queue = n.queue
       AND d.row_nudges = n.nudges AND d.last_nudged_at = n.last_nudged_at
    RETURNING n.endpoint_id, n.queue, n.nudges, n.last_nudged_at
),
charged AS (
    SELECT * FROM inserted UNION ALL SELECT * FROM advanced
),
absorbed AS (
    -- Claims are progress once: this tick absorbs every claim it sees of a pair it
    -- charged or drained, or of a pair with no ledger row (its next nudge is a first
    -- one anyway). A claim that commits after this snapshot stays for the next tick.
    -- Of a pair that keeps its claims, only the latest matters ("is there one", and
    -- the stamp a charge takes): the others go, so the log stays one row per pair.
    DELETE FROM stall_nudge_claims c
     WHERE EXISTS (SELECT 1 FROM charged x WHERE x.endpoint_id = c.endpoint_id AND x.queue = c.queue)
        OR EXISTS (SELECT 1 FROM drained x WHERE x.endpoint_id = c.endpoint_id AND x.queue = c.queue)
        OR NOT EXISTS (SELECT 1 FROM queue_stall_nudges n
                        WHERE n.endpoint_id = c.endpoint_id AND n.queue = c.queue)
        OR EXISTS (SELECT 1 FROM stall_nudge_claims k
                    WHERE k.endpoint_id = c.endpoint_id AND k.queue = c.queue
                      AND (k.claimed_at, k.ctid) > (c.claimed_at, c.ctid))
)
-- The title is read for the (at most tick_limit) charged todos only.
SELECT 'charge' AS kind, c.endpoint_id, c.queue, c.nudges, c.last_nudged_at,
       d.todo_id, d.created_at, t.title, d.rank
  FROM charged c
  JOIN due d ON d.endpoint_id = c.endpoint_id AND d.queue = c.queue
  JOIN todos t ON t.id = d.todo_id
UNION ALL
SELECT 'delete', x.endpoint_id, x.queue, NULL, NULL, NULL, NULL, NULL, NULL
  FROM drained x
ORDER BY 1, 9;

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
    SELECT endpoint_id, queue FROM todos WHERE state = 'pending'
    UNION
    SELECT endpoint_id, queue FROM queue_stall_nudges
),
counts AS (
    SELECT t.endpoint_id, t.queue,
           count(*) FILTER (WHERE {{passes_gate(t)}}) AS gated,
           count(*) FILTER (WHERE NOT {{passes_gate(t)}}) AS ungated
      FROM todos t
     WHERE t.state = 'pending'
     GROUP BY t.endpoint_id, t.queue
)
SELECT p.endpoint_id, p.queue,
       coalesce(c.gated, 0) AS gated,
       coalesce(c.ungated, 0) AS ungated,
       o.id AS todo_id, o.created_at, o.title,
       {{endpoint_active(p.endpoint_id)}} AS endpoint_active,
       {{has_receiver(p.endpoint_id, p.queue)}} AS has_receiver,
       {{unabsorbed_claim_at(p.endpoint_id, p.queue)}} AS unabsorbed_claim_at,
       r.nudges, r.last_nudged_at
  FROM pairs p
  LEFT JOIN counts c ON c.endpoint_id = p.endpoint_id AND c.queue = p.queue
  LEFT JOIN queue_stall_nudges r ON r.endpoint_id = p.endpoint_id AND r.queue = p.queue
  LEFT JOIN LATERAL (
        SELECT t.id, t.created_at, t.title
          FROM todos t
         WHERE t.endpoint_id = p.endpoint_id AND t.queue = p.queue AND t.state = 'pending'
           AND {{passes_gate(t)}}
         ORDER BY t.created_at, t.id COLLATE "C"
         LIMIT 1) o ON true
 ORDER BY p.endpoint_id COLLATE "C", p.queue COLLATE "C";
