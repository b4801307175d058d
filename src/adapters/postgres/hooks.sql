-- The hook directory's statements over the host's notify_hooks, through migrate's view of
-- it in our schema, host_notify_hooks. Each runs in a guest's transaction (ledger.sql's guest). Hook and
-- endpoint ids arrive as text and are read back in the host's type of the id, so each
-- lookup descends the host's index whatever that type is.

-- name: hooks_covering
-- The enabled hooks of an endpoint whose queue filter covers a queue (NULL covers all: stall_core.covers).
SELECT h.id::text AS id, h.endpoint_id::text AS endpoint_id, h.url, h.secret
  FROM host_notify_hooks h
 WHERE h.endpoint_id = (json_populate_record(NULL::host_endpoints, json_build_object('id', $1::text))).id
   AND h.enabled AND (h.queues IS NULL OR $2 = ANY (h.queues))
 ORDER BY h.id;

-- name: record_success
-- Reset a hook's consecutive failure count after a delivered message.
UPDATE host_notify_hooks
   SET consecutive_failures = 0
 WHERE id = (json_populate_record(NULL::host_notify_hooks, json_build_object('id', $1::text))).id
   AND consecutive_failures <> 0;

-- name: record_successes
-- Reset the consecutive failure count of every hook in $1 (a batch of delivered messages).
UPDATE host_notify_hooks
   SET consecutive_failures = 0
 WHERE id IN (SELECT (json_populate_record(NULL::host_notify_hooks, json_build_object('id', b.id))).id
                FROM unnest($1::text[]) AS b (id))
   AND consecutive_failures <> 0;

-- name: record_failure
-- Count one failed delivery; the $2-th in a row disables the hook at $3 for reason $4.
UPDATE host_notify_hooks
   SET consecutive_failures = consecutive_failures + 1,
       enabled = enabled AND consecutive_failures + 1 < $2,
       disabled_at = CASE WHEN enabled AND consecutive_failures + 1 >= $2
                          THEN $3 ELSE disabled_at END,
       disabled_reason = CASE WHEN enabled AND consecutive_failures + 1 >= $2
                              THEN $4 ELSE disabled_reason END
 WHERE id = (json_populate_record(NULL::host_notify_hooks, json_build_object('id', $1::text))).id
RETURNING consecutive_failures, enabled;
