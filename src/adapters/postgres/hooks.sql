-- The hook directory's queries over the host's notify_hooks table.
-- Each query sits under a "-- name: <name>" header and a one-line description. Each runs
-- in a guest's transaction (ledger.sql's guest), @notify_hooks named with its schema.

-- name: hooks_covering
-- The enabled hooks of an endpoint whose queue filter covers a queue (NULL covers all).
SELECT h.id::text AS id, h.endpoint_id::text AS endpoint_id, h.url, h.secret
  FROM @notify_hooks h
 CROSS JOIN (SELECT {{endpoint_key($1)}} AS key) k
 WHERE {{covers(h, k.key, $2)}} AND h.enabled
 ORDER BY h.id;

-- name: record_success
-- Reset a hook's consecutive failure count after a delivered message.
UPDATE @notify_hooks
SET consecutive_failures = 0
WHERE id = {{hook_key($1)}} AND consecutive_failures <> 0;

-- name: record_successes
-- Reset the consecutive failure count of every hook in $1 (a batch of delivered messages).
UPDATE @notify_hooks
SET consecutive_failures = 0
WHERE id IN (SELECT {{hook_key(batch.id)}} FROM unnest($1::text[]) AS batch(id))
  AND consecutive_failures <> 0;

-- name: record_failure
-- Count one failed delivery; the $2-th in a row disables the hook at $3 for reason $4.
UPDATE @notify_hooks
SET consecutive_failures = consecutive_failures + 1,
    enabled = enabled AND consecutive_failures + 1 < $2,
    disabled_at = CASE WHEN enabled AND consecutive_failures + 1 >= $2
                       THEN $3 ELSE disabled_at END,
    disabled_reason = CASE WHEN enabled AND consecutive_failures + 1 >= $2
                           THEN $4 ELSE disabled_reason END
WHERE id = {{hook_key($1)}}
RETURNING consecutive_failures, enabled;
