-- The reference host's verbs (switchboard's side of the board), used by the
-- contract suite, the demo and the soak. Loaded by adapters/postgres/sql.py.

-- name: add_endpoint
-- Register an endpoint.
INSERT INTO endpoints (id, state) VALUES ($1, $2);

-- name: set_endpoint_state
-- Pause, resume or disable an endpoint.
UPDATE endpoints SET state = $2 WHERE id = $1 RETURNING id;

-- name: add_delivery
-- Record an inbound delivery and whether its signature verified.
INSERT INTO deliveries (id, endpoint_id, verified, received_at) VALUES ($1, $2, $3, $4);

-- name: add_hook
-- Register a notify hook; NULL queues covers every queue of the endpoint.
INSERT INTO notify_hooks (id, endpoint_id, url, secret, queues, enabled)
VALUES ($1, $2, $3, $4, $5, $6);

-- name: set_hook_enabled
-- Enable (clearing the failure count) or disable a hook.
UPDATE notify_hooks
   SET enabled = $2,
       consecutive_failures = CASE WHEN $2 THEN 0 ELSE consecutive_failures END,
       disabled_at = CASE WHEN $2 THEN NULL ELSE $3::timestamptz END,
       disabled_reason = CASE WHEN $2 THEN NULL ELSE $4::text END
 WHERE id = $1
RETURNING id;

-- name: set_hook_queues
-- Change which queues a hook covers.
UPDATE notify_hooks SET queues = $2 WHERE id = $1 RETURNING id;

-- name: create_todo
-- Create a pending todo and ring the todo_ready channel with the stable "<endpoint_id>:<queue>" payload.
-- NOTIFY refuses payloads of 8000 bytes or more; such a pair's todo is still created, unrung:
-- a lost edge costs latency, and the sweep surfaces the work after the threshold.
WITH created AS (
    INSERT INTO todos (id, endpoint_id, queue, delivery_id, state, title, created_at)
    VALUES ($1, $2, $3, $4, 'pending', $5, $6)
    RETURNING endpoint_id, queue
)
SELECT pg_notify('todo_ready', endpoint_id || ':' || queue) FROM created
 WHERE octet_length(endpoint_id || ':' || queue) < 8000;

-- name: claim
-- Claim one pending todo for an owner with a lease; claimed_at is the database's clock unless given.
-- The database's clock is the one every nudge decision is measured on (docs/operations.md).
UPDATE todos
   SET state = 'claimed', claimed_at = c.at, claim_owner = $2, lease_expires_at = c.at + $4::interval
  FROM (SELECT coalesce($3::timestamptz, now()) AS at) c
 WHERE id = $1 AND state = 'pending'
RETURNING id;

-- name: claim_next
-- Claim the pair's oldest pending todo, skipping rows another consumer is claiming.
UPDATE todos
   SET state = 'claimed', claimed_at = c.at, claim_owner = $3, lease_expires_at = c.at + $5::interval
  FROM (SELECT coalesce($4::timestamptz, now()) AS at) c
 WHERE id = (SELECT id FROM todos
              WHERE endpoint_id = $1 AND queue = $2 AND state = 'pending'
              ORDER BY created_at, id COLLATE "C"
              LIMIT 1
              FOR UPDATE SKIP LOCKED)
RETURNING id;

-- name: complete
-- Mark a claimed todo done; claimed_at stays, or goes when $2 (a host that un-stamps at completion).
UPDATE todos
   SET state = 'done', claim_owner = NULL, lease_expires_at = NULL,
       claimed_at = CASE WHEN $2 THEN NULL ELSE claimed_at END
 WHERE id = $1 AND state = 'claimed'
RETURNING id;

-- name: requeue
-- Return a claimed todo to pending; claimed_at stays (the claim happened), or goes when $2.
UPDATE todos
   SET state = 'pending', claim_owner = NULL, lease_expires_at = NULL, attempt = attempt + 1,
       claimed_at = CASE WHEN $2 THEN NULL ELSE claimed_at END
 WHERE id = $1 AND state = 'claimed'
RETURNING id;

-- name: move_todo
-- Move a todo to another queue of its endpoint (a rebalancer, an operator).
UPDATE todos SET queue = $2 WHERE id = $1 RETURNING id;

-- name: delete_todo
-- Delete a todo whatever its state (a host that deletes finished work).
DELETE FROM todos WHERE id = $1 RETURNING id;

-- name: set_delivery_verified
-- Change whether a delivery passes the sender gate (a late verification, a revocation).
UPDATE deliveries SET verified = $2 WHERE id = $1 RETURNING id;

-- name: ring
-- The SPEC-0011 doorbell ring for one todo: spends its ring budget.
UPDATE todos SET ring_attempts = ring_attempts + 1, last_ringed_at = $2 WHERE id = $1 RETURNING id;

-- name: todos
-- Every todo row, every column.
SELECT id, endpoint_id, queue, delivery_id, state, title, created_at, claimed_at, claim_owner,
       lease_expires_at, attempt, ring_attempts, last_ringed_at
  FROM todos;

-- name: todo_state
-- One todo's state, to explain a refused verb.
SELECT state FROM todos WHERE id = $1;
