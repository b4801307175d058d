-- Queries of the Postgres ledger. Each query starts with a "-- name: NAME"
-- line and a one-line description; adapters/_sql.py loads them once.
-- Every policy number arrives as a parameter from PacingPolicy.

-- name: charge_due
-- Decide, charge (at most tick_limit, least-nudged first) and delete drained rows, in one statement.
-- $1 now, $2 threshold (µs), $3 backoff (µs[]), $4 cap, $5 tick_limit, $6 quarantine queue name.
-- Durations arrive as microseconds so no interval carries a days field: PostgreSQL
-- would add those as calendar days in the session time zone (25 h across DST).
--
-- Cost follows pairs, not todos: one index descent per (endpoint_id, queue) with
-- pending work (the skip scan), whose first entry is already that pair's oldest
-- pending todo; then only cheap work per pair (a hashed lookup in the few
-- unverified deliveries, the ledger row, and the progress index only for pairs
-- that have a ledger row). See docs/benchmarks.md.
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
    -- Does each head pass the sender gate? "No unverified delivery with this id" is
    -- "verified" because todos.delivery_id references deliveries(id) (host schema);
    -- unverified deliveries are few, and stall_nudge_deliveries_unverified holds
    -- only them. Inside an expression this is a hashed subplan, never a join.
    -- Quarantine is not work.
    SELECT h.endpoint_id, h.queue, h.id, h.created_at,
           (h.delivery_id IS NULL
            OR NOT EXISTS (SELECT 1 FROM deliveries d
                            WHERE d.id = h.delivery_id AND NOT d.verified)) AS passes
      FROM heads h
     WHERE h.queue <> $6
),
work AS (
    -- Each pair's oldest pending todo that passes the sender gate: the head itself,
    -- or, for a pair whose head came from an unverified delivery, a search of the pair.
    SELECT g.endpoint_id, g.queue, g.id AS todo_id, g.created_at
      FROM gated g
     WHERE g.passes
    UNION ALL
    SELECT g.endpoint_id, g.queue, o.id, o.created_at
      FROM gated g
     CROSS JOIN LATERAL (
            SELECT t.id, t.created_at
              FROM todos t
             WHERE t.endpoint_id = g.endpoint_id AND t.queue = g.queue AND t.state = 'pending'
               AND (t.delivery_id IS NULL
                    OR NOT EXISTS (SELECT 1 FROM deliveries d
                                    WHERE d.id = t.delivery_id AND NOT d.verified))
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
    -- a ledger row (MATERIALIZED keeps "spent" from being computed again in "due").
    SELECT w.endpoint_id, w.queue, w.todo_id, w.created_at,
           CASE
               WHEN r.endpoint_id IS NULL THEN 0
               WHEN EXISTS (SELECT 1 FROM todos t
                             WHERE t.endpoint_id = r.endpoint_id AND t.queue = r.queue
                               AND t.claimed_at > r.last_nudged_at) THEN 0
               ELSE r.nudges
           END AS spent,
           r.last_nudged_at
      FROM work w
      JOIN endpoints e ON e.id = w.endpoint_id AND e.state = 'active'
      LEFT JOIN queue_stall_nudges r ON r.endpoint_id = w.endpoint_id AND r.queue = w.queue
     WHERE w.created_at < $1::timestamptz - $2::bigint * interval '1 microsecond'
       AND EXISTS (SELECT 1 FROM notify_hooks h
                    WHERE h.endpoint_id = w.endpoint_id AND h.enabled
                      AND (h.queues IS NULL OR w.queue = ANY (h.queues)))
),
due AS (
    -- D6 order; the inner ORDER BY ... LIMIT is a top-N sort, so a storm of due
    -- pairs is never sorted whole.
    SELECT c.*,
           row_number() OVER (ORDER BY c.spent, c.created_at,
                              c.endpoint_id COLLATE "C", c.queue COLLATE "C") AS rank
      FROM (SELECT c.*
              FROM candidate c
             WHERE c.spent = 0
                OR (c.spent < $4
                    AND $1 >= c.last_nudged_at
                              + ($3::bigint[])[LEAST(c.spent, cardinality($3::bigint[]))]
                                * interval '1 microsecond')
             ORDER BY c.spent, c.created_at, c.endpoint_id COLLATE "C", c.queue COLLATE "C"
             LIMIT $5) c
),
charged AS (
    -- ON CONFLICT re-checks "due" on the row as locked: a nudge another sweeper
    -- committed first makes the WHERE false, so it is neither counted nor returned.
    INSERT INTO queue_stall_nudges AS n (endpoint_id, queue, nudges, last_nudged_at)
    -- A row absent at lock time is a first nudge, whatever the snapshot saw (D1).
    SELECT d.endpoint_id, d.queue, 1, $1 FROM due d
    ON CONFLICT (endpoint_id, queue) DO UPDATE
       SET nudges = CASE
                        WHEN EXISTS (SELECT 1 FROM todos t
                                      WHERE t.endpoint_id = n.endpoint_id AND t.queue = n.queue
                                        AND t.claimed_at > n.last_nudged_at) THEN 1
                        ELSE n.nudges + 1
                    END,
           last_nudged_at = EXCLUDED.last_nudged_at
     WHERE EXISTS (SELECT 1 FROM todos t
                    WHERE t.endpoint_id = n.endpoint_id AND t.queue = n.queue
                      AND t.claimed_at > n.last_nudged_at)
        OR (n.nudges < $4
            AND EXCLUDED.last_nudged_at
                >= n.last_nudged_at + ($3::bigint[])[LEAST(n.nudges, cardinality($3::bigint[]))]
                                      * interval '1 microsecond')
    RETURNING n.endpoint_id, n.queue, n.nudges
)
-- The title is read for the (at most tick_limit) charged todos only.
SELECT 'charge' AS kind, c.endpoint_id, c.queue, c.nudges, d.todo_id, d.created_at, t.title, d.rank
  FROM charged c
  JOIN due d ON d.endpoint_id = c.endpoint_id AND d.queue = c.queue
  JOIN todos t ON t.id = d.todo_id
UNION ALL
SELECT 'delete', x.endpoint_id, x.queue, NULL, NULL, NULL, NULL, NULL
  FROM drained x
ORDER BY 1, 8;

-- name: ledger_rows
-- Every ledger row, for inspection and status.
SELECT endpoint_id, queue, nudges, last_nudged_at FROM queue_stall_nudges;

-- name: pair_status
-- Every pair with a pending todo or a ledger row, with what "is my queue drained?" needs.
WITH pairs AS (
    SELECT endpoint_id, queue FROM todos WHERE state = 'pending'
    UNION
    SELECT endpoint_id, queue FROM queue_stall_nudges
),
counts AS (
    SELECT t.endpoint_id, t.queue,
           count(*) FILTER (WHERE t.delivery_id IS NULL OR d.verified) AS gated,
           count(*) FILTER (WHERE t.delivery_id IS NOT NULL AND NOT d.verified) AS ungated
      FROM todos t
      LEFT JOIN deliveries d ON d.id = t.delivery_id
     WHERE t.state = 'pending'
     GROUP BY t.endpoint_id, t.queue
)
SELECT p.endpoint_id, p.queue,
       coalesce(c.gated, 0) AS gated,
       coalesce(c.ungated, 0) AS ungated,
       o.id AS todo_id, o.created_at, o.title,
       coalesce(e.state = 'active', false) AS endpoint_active,
       EXISTS (SELECT 1 FROM notify_hooks h
                WHERE h.endpoint_id = p.endpoint_id AND h.enabled
                  AND (h.queues IS NULL OR p.queue = ANY (h.queues))) AS has_receiver,
       (SELECT max(t.claimed_at) FROM todos t
         WHERE t.endpoint_id = p.endpoint_id AND t.queue = p.queue) AS last_claimed_at,
       r.nudges, r.last_nudged_at
  FROM pairs p
  LEFT JOIN counts c ON c.endpoint_id = p.endpoint_id AND c.queue = p.queue
  LEFT JOIN endpoints e ON e.id = p.endpoint_id
  LEFT JOIN queue_stall_nudges r ON r.endpoint_id = p.endpoint_id AND r.queue = p.queue
  LEFT JOIN LATERAL (
        SELECT t.id, t.created_at, t.title
          FROM todos t
          LEFT JOIN deliveries d ON d.id = t.delivery_id
         WHERE t.endpoint_id = p.endpoint_id AND t.queue = p.queue AND t.state = 'pending'
           AND (t.delivery_id IS NULL OR d.verified)
         ORDER BY t.created_at, t.id COLLATE "C"
         LIMIT 1) o ON true
 ORDER BY p.endpoint_id COLLATE "C", p.queue COLLATE "C";
