-- The replay's reads of the host's history (stall-nudge simulate --replay --dsn). Each runs in a
-- READ ONLY transaction made a guest's first (ledger.sql's guest): names resolve in pg_catalog,
-- then our schema, whose host_ views are migrate's views of the host's tables, so nothing another
-- role created is resolved and the reading role needs only SELECT on the host's columns.
-- Ids come back as text, whatever the host's id type.

-- name: history_todos
-- The todos on the board in the window [$1, $2]: created in it, or before it and not yet claimed at its start; with their delivery's verified flag, for the gate.
-- A todo created before the window that was claimed before it, or finished with no claim stamp,
-- was not on the board: it is left out. The gate itself is stall_core.passes_gate, applied by
-- the reader (adapters.postgres._history) to delivery_id and verified (NULL: row missing).
SELECT t.id::text AS id, t.endpoint_id::text AS endpoint_id, t.queue::text AS queue,
       t.created_at, t.claimed_at, t.state::text AS state,
       t.delivery_id::text AS delivery_id, d.verified
  FROM host_todos t
  LEFT JOIN host_deliveries d ON d.id = t.delivery_id
 WHERE t.created_at <= $2
   AND (t.created_at >= $1 OR t.state = 'pending' OR t.claimed_at >= $1)
 ORDER BY t.created_at, t.id;

-- name: history_endpoints
-- Every endpoint and its state, as it is now.
SELECT e.id::text AS id, e.state::text AS state
  FROM host_endpoints e
 ORDER BY e.id;

-- name: history_hooks
-- Every notify hook's endpoint, queue filter (NULL: all queues) and whether it is enabled, as it is now.
SELECT h.id::text AS id, h.endpoint_id::text AS endpoint_id, h.queues::text[] AS queues, h.enabled
  FROM host_notify_hooks h
 ORDER BY h.id;

-- name: history_kept
-- Whether this build keeps the operators' history (stall_nudge.history) and this role may read it.
SELECT CASE WHEN pg_catalog.to_regclass('stall_nudge.history') IS NULL THEN false
            ELSE pg_catalog.has_table_privilege(pg_catalog.to_regclass('stall_nudge.history'), 'SELECT')
       END;

-- name: history_covers
-- Whether the operators' history still holds every charge since $1: a row as old is left (the tick prunes oldest first), or $1 is within the retention $2.
SELECT $1::timestamptz >= $2::timestamptz OR EXISTS (SELECT FROM stall_nudge.history h WHERE h.at <= $1);

-- name: history_nudges
-- The nudges the sweep charged in the window [$1, $2], from the operators' history, oldest first,
-- in a tick in plan_tick's order (by pair); each with its outcome (NULL: not booked yet). Every
-- charge is kept, delivered or not: the replay compares them all, and wakes consumers only with
-- those that reached a receiver (stall_sim.history.RecordedNudge.reached).
SELECT h.at AS charged_at, h.endpoint_id, h.queue, h.nudge, h.todo_id, h.outcome
  FROM stall_nudge.history h
 WHERE h.event = 'charged' AND h.at >= $1 AND h.at <= $2
 ORDER BY h.at, h.endpoint_id COLLATE "C", h.queue COLLATE "C";
