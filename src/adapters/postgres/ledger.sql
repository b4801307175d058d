-- The ledger's statements outside a tick: a guest's transaction, inspection and status.
-- Each runs after guest (or tick_lock, tick.sql), under the search_path pg_catalog,
-- stall_nudge, pg_temp: host_todos and the other host_ views are migrate's views of the
-- host's tables.

-- name: guest
-- Make this transaction a guest's: from here on it resolves names in pg_catalog, then our own schema (the ledger, and migrate's views of the host's tables), so nothing another role creates is ever resolved.
-- Local to the transaction: the session's own search_path (an embedder's pool) is untouched.
-- Returns the host's schema migrate recorded (NULL: not migrated).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, stall_nudge, pg_temp', true),
       (SELECT g.host_schema FROM stall_nudge.settings g) AS host_schema;

-- name: now
-- The database's clock, the time authority every decision is measured on.
SELECT pg_catalog.clock_timestamp();

-- name: ledger_rows
-- Every ledger row, for inspection and tests.
SELECT endpoint_id, queue, nudges, last_nudged_at, named_todo, progressed_at
  FROM queue_stall_nudges;

-- name: count_ledger_rows
-- How many ledger rows there are (the metrics' gauge).
SELECT count(*) FROM stall_nudge.queue_stall_nudges;

-- name: fleet_record
-- The fleet's record of its ticks, for status.
SELECT t.swept_at, t.interval_ms, t.last_kind, t.last_judged, t.full_pass_at, t.full_pass_ms,
       t.full_pass_pairs, t.judged_to, t.claims_read_ids, t.claims_read_at
  FROM (SELECT 1) one
  LEFT JOIN stall_nudge.ticks t ON true;

-- name: pair_status
-- "Is my queue drained?": every pair with a pending todo, a ledger row or a held entry, with the facts its verdict needs (stall_core.pair_status turns them into the verdict).
-- $1 the quarantine queue, $2 the claims window (stall_core.claims_window), $3 and $4 the
-- claims the last tick read (todo ids, stamps), $5 the outcomes that reached no receiver
-- (stall_core.REACHED_NOBODY). One pass over
-- the pending todos (status is an operator's command, not the tick) counts each pair's
-- todos past the sender gate and held by it (stall_core.passes_gate) and finds its work
-- (stall_core.work_of); one range scan finds each pair's latest new claim
-- (stall_core.latest_claim); then per pair one descent each for its receiver, its endpoint
-- (and its name: NULL in our view where the host keeps none) and its hooks' health, and its
-- first todo holding an instant the sweep does not read (stall_core.readable); one pass
-- over the history finds when each pair's nudges last reached no receiver
-- (stall_core.PairStatus.last_failure_at).
WITH pending AS (
    SELECT t.endpoint_id, t.queue,
           count(*) FILTER (WHERE g.passes) AS sendable,
           count(*) FILTER (WHERE NOT g.passes) AS held_by_gate,
           (array_agg(t.id::text ORDER BY t.created_at, t.id::text COLLATE "C")
              FILTER (WHERE g.work))[1] AS todo_id,
           min(t.created_at) FILTER (WHERE g.work) AS created_at
      FROM host_todos t
     CROSS JOIN LATERAL (
            SELECT t.delivery_id IS NULL
                   OR (EXISTS (SELECT 1 FROM host_deliveries d WHERE d.id = t.delivery_id)
                       AND NOT EXISTS (SELECT 1 FROM host_deliveries u
                                        WHERE u.id = t.delivery_id AND NOT u.verified))
                   AS passes) p
     CROSS JOIN LATERAL (
            SELECT p.passes, p.passes AND t.queue <> $1
                   AND octet_length(t.endpoint_id::text) + octet_length(t.queue) <= 2000
                   AND t.created_at > '0001-01-01 00:00:00+00'
                   AND t.created_at < '9999-12-31 23:59:59.999999+00' AS work) g
     WHERE t.state = 'pending'
     GROUP BY t.endpoint_id, t.queue
),
found AS (
    SELECT p.endpoint_id::text AS endpoint_id, p.queue, p.endpoint_id AS key,
           p.sendable, p.held_by_gate, p.todo_id, p.created_at
      FROM pending p
    UNION ALL
    SELECT o.endpoint_id, o.queue,
           (json_populate_record(NULL::host_endpoints, json_build_object('id', o.endpoint_id))).id,
           0, 0, NULL, NULL
      FROM (SELECT r.endpoint_id, r.queue FROM queue_stall_nudges r
            UNION
            SELECT h.endpoint_id, h.queue FROM held h) o
     WHERE NOT EXISTS (SELECT 1 FROM pending p
                        WHERE p.endpoint_id::text = o.endpoint_id AND p.queue = o.queue)
),
recent AS (
    SELECT c.endpoint_id::text AS endpoint_id, c.queue, max(c.claimed_at) AS latest
      FROM host_todos c
     WHERE coalesce(c.claimed_at, c.created_at) > $2
       AND c.claimed_at < '9999-12-31 23:59:59.999999+00' AND c.state <> 'pending'
       AND (c.id::text, c.claimed_at) NOT IN (SELECT * FROM unnest($3::text[], $4::timestamptz[]))
     GROUP BY c.endpoint_id, c.queue
),
unreadable AS (
    -- Each pair's first todo (by id) holding an instant the sweep does not read: a pending
    -- todo's created_at (not work), else any todo's claimed_at (not progress), as PostgreSQL
    -- prints it: a pass over the pending todos (as above), and range scans at the two ends
    -- of the activity index.
    SELECT DISTINCT ON (u.endpoint_id, u.queue) u.endpoint_id, u.queue, u.id, u.column_name, u.value
      FROM (SELECT x.endpoint_id::text AS endpoint_id, x.queue, x.id::text AS id,
                   'created_at' AS column_name, coalesce(x.created_at::text, 'NULL') AS value
              FROM host_todos x
             WHERE x.state = 'pending'
               AND (x.created_at IS NULL OR x.created_at <= '0001-01-01 00:00:00+00'
                    OR x.created_at >= '9999-12-31 23:59:59.999999+00')
            UNION ALL
            SELECT x.endpoint_id::text, x.queue, x.id::text, 'claimed_at', x.claimed_at::text
              FROM host_todos x
             WHERE (coalesce(x.claimed_at, x.created_at) <= '0001-01-01 00:00:00+00'
                    OR coalesce(x.claimed_at, x.created_at) >= '9999-12-31 23:59:59.999999+00')
               AND (x.claimed_at <= '0001-01-01 00:00:00+00'
                    OR x.claimed_at >= '9999-12-31 23:59:59.999999+00')) u
     ORDER BY u.endpoint_id, u.queue, u.column_name <> 'created_at', u.id COLLATE "C"
),
failed AS (
    SELECT x.endpoint_id, x.queue, max(x.settled_at) AS at
      FROM history x
     WHERE x.event = 'charged' AND x.outcome = ANY ($5::text[])
     GROUP BY x.endpoint_id, x.queue
)
SELECT f.endpoint_id, f.queue, f.sendable, f.held_by_gate, f.todo_id, f.created_at,
       (SELECT t.title FROM host_todos t
         WHERE t.id = (json_populate_record(NULL::host_todos, json_build_object('id', f.todo_id))).id)
       AS title,
       EXISTS (SELECT 1 FROM host_endpoints e WHERE e.id = f.key AND e.state = 'active')
       AS endpoint_active,
       (SELECT e.name FROM host_endpoints e WHERE e.id = f.key) AS endpoint_name,
       coalesce(h.receivers, 0) > 0 AS has_receiver,
       c.latest AS latest_claim,
       r.named_todo IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM host_todos n
                        WHERE n.id = (json_populate_record(
                                 NULL::host_todos, json_build_object('id', r.named_todo))).id
                          AND n.state = 'pending' AND n.endpoint_id = f.key
                          AND n.queue = f.queue) AS named_departed,
       r.nudges, r.last_nudged_at, r.named_todo, r.progressed_at,
       coalesce(h.hook_failures, 0) AS hook_failures, coalesce(h.hooks_disabled, 0) AS hooks_disabled,
       u.id AS unreadable_todo, u.column_name AS unreadable_column, u.value AS unreadable_value,
       l.at AS last_failure_at
  FROM found f
  LEFT JOIN queue_stall_nudges r ON r.endpoint_id = f.endpoint_id AND r.queue = f.queue
  LEFT JOIN recent c ON c.endpoint_id = f.endpoint_id AND c.queue = f.queue
  LEFT JOIN LATERAL (
        -- The covering hooks (stall_core.covers): how many are enabled (receivers), the most
        -- consecutive failures of one of those, and how many are disabled.
        SELECT count(*) FILTER (WHERE c.enabled) AS receivers,
               max(c.consecutive_failures) FILTER (WHERE c.enabled) AS hook_failures,
               count(*) FILTER (WHERE NOT c.enabled) AS hooks_disabled
          FROM host_notify_hooks c
         WHERE c.endpoint_id = f.key AND (c.queues IS NULL OR f.queue = ANY (c.queues))) h
    ON true
  LEFT JOIN unreadable u ON u.endpoint_id = f.endpoint_id AND u.queue = f.queue
  LEFT JOIN failed l ON l.endpoint_id = f.endpoint_id AND l.queue = f.queue
 ORDER BY f.endpoint_id COLLATE "C", f.queue COLLATE "C";

-- name: recent_outcomes
-- Each pair's last $1 charges with their outcomes, newest first (stall_core.PairStatus.last_outcomes): one pass over the history.
SELECT x.at, x.endpoint_id, x.queue, x.event, x.nudge, x.todo_id, x.outcome, x.detail, x.actor,
       x.until, x.settled_at
  FROM (SELECT h.*, row_number() OVER (PARTITION BY h.endpoint_id, h.queue
                                       ORDER BY h.at DESC, h.nudge DESC) AS n
          FROM history h
         WHERE h.event = 'charged') x
 WHERE x.n <= $1
 ORDER BY x.endpoint_id COLLATE "C", x.queue COLLATE "C", x.at DESC, x.nudge DESC;

-- name: pair_exists
-- Whether an operator's endpoint exists, and its queue: a todo in any state, or a ledger row.
-- $1 endpoint id (text: cast to the host's type here, a malformed one fails), $2 queue (NULL:
-- the endpoint alone).
SELECT EXISTS (SELECT FROM host_endpoints e WHERE e.id = (json_populate_record(
                  NULL::host_endpoints, json_build_object('id', $1::text))).id) AS endpoint,
       $2::text IS NULL
       OR EXISTS (SELECT FROM queue_stall_nudges r WHERE (r.endpoint_id, r.queue) = ($1, $2))
       OR EXISTS (SELECT FROM host_todos t WHERE t.queue = $2 AND t.endpoint_id = (
                     json_populate_record(NULL::host_todos,
                                          json_build_object('endpoint_id', $1::text))).endpoint_id)
          AS queue;

-- name: silence
-- Silence a pair, or every queue of an endpoint (queue NULL), replacing its silence.
-- $1 endpoint id, $2 queue or NULL, $3 now, $4 when it ends, $5 by whom, $6 why.
INSERT INTO silences AS s (endpoint_id, queue, starts_at, ends_at, created_by, reason)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (endpoint_id, queue) DO UPDATE
   SET starts_at = EXCLUDED.starts_at, ends_at = EXCLUDED.ends_at,
       created_by = EXCLUDED.created_by, reason = EXCLUDED.reason
RETURNING s.endpoint_id, s.queue, s.starts_at, s.ends_at, s.created_by, s.reason;

-- name: unsilence
-- End the silence of exactly this pair (or endpoint, queue NULL) now, if one holds.
-- $1 endpoint id, $2 queue or NULL, $3 now.
UPDATE silences AS s SET ends_at = $3
 WHERE s.endpoint_id = $1 AND s.queue IS NOT DISTINCT FROM $2::text AND s.ends_at > $3
RETURNING s.endpoint_id, s.queue, s.starts_at, s.ends_at, s.created_by, s.reason;

-- name: silences
-- Every silence not ended at $1, by endpoint and queue (an endpoint's own first).
SELECT s.endpoint_id, s.queue, s.starts_at, s.ends_at, s.created_by, s.reason
  FROM silences s
 WHERE s.ends_at > $1
 ORDER BY s.endpoint_id COLLATE "C", s.queue COLLATE "C" NULLS FIRST;

-- name: reset_pair
-- Start a pair over by hand (stall_core.reset_row): count 0, progress kept, so its next nudge is nudge 1, due at once.
-- $1 endpoint id, $2 queue, $3 now. Run under the tick lock.
UPDATE queue_stall_nudges AS n
   SET nudges = 0, progressed_at = coalesce(n.progressed_at, $3)
 WHERE n.endpoint_id = $1 AND n.queue = $2
RETURNING n.endpoint_id, n.queue, n.nudges, n.last_nudged_at, n.named_todo, n.progressed_at;

-- name: hold_pair
-- Have the next delta judge a pair an operator reset: a held entry, first in charge order.
-- $1 endpoint id, $2 queue, $3 now (the entry's age when the pair has no pending todo). Its
-- age is the oldest pending todo created at a readable instant (stall_core.readable): an
-- ordering hint only, the judge decides.
INSERT INTO held AS h (endpoint_id, queue, spent, created_at)
SELECT $1, $2, 0, coalesce(min(t.created_at), $3)
  FROM host_todos t
 WHERE t.state = 'pending' AND t.queue = $2
   AND t.created_at > '0001-01-01+00' AND t.created_at < '9999-12-31 23:59:59.999999+00'
   AND t.endpoint_id = (json_populate_record(NULL::host_todos,
                                             json_build_object('endpoint_id', $1::text))).endpoint_id
ON CONFLICT (endpoint_id, queue) DO UPDATE SET spent = 0, created_at = EXCLUDED.created_at;

-- name: record_action
-- Keep an operator's action in the history: who, when and why.
-- $1 now, $2 endpoint id, $3 queue or NULL, $4 the action (stall_core.ACTIONS), $5 by whom,
-- $6 why, $7 when a silence ends (NULL for the others).
INSERT INTO history (at, endpoint_id, queue, event, actor, detail, until)
VALUES ($1, $2, $3, $4, $5, $6, $7);

-- name: record_outcome
-- Book a charge's outcome on its history row, once (stall_core.OUTCOMES).
-- $1 endpoint id, $2 queue, $3 nudge number, $4 its stamp, $5 the outcome, $6 why it was not
-- delivered, $7 now.
UPDATE history
   SET outcome = $5, detail = $6, settled_at = $7
 WHERE at = $4 AND endpoint_id = $1 AND queue = $2 AND nudge = $3 AND event = 'charged'
   AND outcome IS NULL;

-- name: history
-- The history newest first, since $1, of endpoint $2 and queue $3 (NULL: all), at most $4 rows.
-- An endpoint's own actions (queue NULL) show with each of its queues.
SELECT h.at, h.endpoint_id, h.queue, h.event, h.nudge, h.todo_id, h.outcome, h.detail, h.actor,
       h.until, h.settled_at
  FROM history h
 WHERE h.at >= $1 AND ($2::text IS NULL OR h.endpoint_id = $2)
   AND ($3::text IS NULL OR h.queue = $3 OR h.queue IS NULL)
 ORDER BY h.at DESC, h.endpoint_id COLLATE "C", h.queue COLLATE "C", h.nudge
 LIMIT $4;
