-- The demo's switchboard: the few host writes the reported case needs, on the
-- reference host schema (`migrate --host-schema`). Loaded by adapters.postgres.sql.
-- Timestamps come from the demo's accelerated clock, which stands in for the
-- database's (the ledger decides on it too).

-- name: add_endpoint
-- Register the demo's active endpoint.
INSERT INTO endpoints (id, state) VALUES ($1, 'active');

-- name: add_delivery
-- The verified inbound delivery the demo's todos come from.
INSERT INTO deliveries (id, endpoint_id, verified, received_at) VALUES ($1, $2, true, $3);

-- name: add_hook
-- The one-shot consumer's notify hook, covering every queue.
INSERT INTO notify_hooks (id, endpoint_id, url, secret, enabled) VALUES ($1, $2, $3, $4, true);

-- name: create_todo
-- One pending todo of an inbound webhook.
INSERT INTO todos (id, endpoint_id, queue, delivery_id, state, title, created_at)
VALUES ($1, $2, $3, $4, 'pending', $5, $6);

-- name: claim_next
-- Claim the pair's oldest pending todo and complete it: a one-shot consumer's whole run.
UPDATE todos
   SET state = 'done', claimed_at = $3
 WHERE id = (SELECT id FROM todos
              WHERE endpoint_id = $1 AND queue = $2 AND state = 'pending'
              ORDER BY created_at, id COLLATE "C"
              LIMIT 1
              FOR UPDATE SKIP LOCKED)
RETURNING id;

-- name: left_over
-- Todos not done at the end of the demo, by id.
SELECT id FROM todos WHERE state <> 'done' ORDER BY id;

-- name: todo_count
-- How many todos the demo created.
SELECT count(*) FROM todos;
