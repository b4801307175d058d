-- statement: hooks_covering
-- The enabled hooks of an endpoint whose queue filter covers a queue (NULL covers all).
SELECT h.id::text AS id, h.endpoint_id::text AS endpoint_id, h.url, h.secret
  FROM @notify_hooks h
 CROSS JOIN (SELECT (json_populate_record(NULL::@endpoints, json_build_object('id', $1::text))).id AS key) k
 WHERE (h.endpoint_id = k.key AND (h.queues IS NULL OR $2 = ANY (h.queues))) AND h.enabled
 ORDER BY h.id;

-- statement: record_success
-- Reset a hook's consecutive failure count after a delivered message.
UPDATE @notify_hooks
SET consecutive_failures = 0
WHERE id = (json_populate_record(NULL::@notify_hooks, json_build_object('id', $1::text))).id AND consecutive_failures <> 0;

-- statement: record_successes
-- Reset the consecutive failure count of every hook in $1 (a batch of delivered messages).
UPDATE @notify_hooks
SET consecutive_failures = 0
WHERE id IN (SELECT (json_populate_record(NULL::@notify_hooks, json_build_object('id', batch.id::text))).id FROM unnest($1::text[]) AS batch(id))
  AND consecutive_failures <> 0;

-- statement: record_failure
-- Count one failed delivery; the $2-th in a row disables the hook at $3 for reason $4.
UPDATE @notify_hooks
SET consecutive_failures = consecutive_failures + 1,
    enabled = enabled AND consecutive_failures + 1 < $2,
    disabled_at = CASE WHEN enabled AND consecutive_failures + 1 >= $2
                       THEN $3 ELSE disabled_at END,
    disabled_reason = CASE WHEN enabled AND consecutive_failures + 1 >= $2
                           THEN $4 ELSE disabled_reason END
WHERE id = (json_populate_record(NULL::@notify_hooks, json_build_object('id', $1::text))).id
RETURNING consecutive_failures, enabled;

