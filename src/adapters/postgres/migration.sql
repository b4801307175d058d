-- What stall-nudge owns: the nudge ledger, and the indexes its sweep needs on
-- the host's tables. Idempotent: every object is created IF NOT EXISTS.

CREATE TABLE IF NOT EXISTS queue_stall_nudges (
    endpoint_id    text NOT NULL,
    queue          text NOT NULL,
    nudges         int NOT NULL CHECK (nudges >= 1),
    last_nudged_at timestamptz NOT NULL,
    PRIMARY KEY (endpoint_id, queue)
);

-- Pending todos in pair order, oldest first: the skip-scan over pairs walks
-- it, and its first entry per pair is that pair's oldest pending todo.
-- id sorts by code point so ties break as the pure core breaks them.
-- endpoint_id and queue use text_pattern_ops (byte-wise order, the sweep's
-- ~<~ / ~>~): the skip scan compares on every entry of each page it lands on,
-- and equality lookups (=) in the database's collation still use the index.
-- INCLUDE delivery_id lets the sweep test the sender gate from the index alone.
CREATE INDEX IF NOT EXISTS stall_nudge_todos_pending
    ON todos (endpoint_id text_pattern_ops, queue text_pattern_ops, created_at, id COLLATE "C")
    INCLUDE (delivery_id)
    WHERE state = 'pending';

-- Latest claim per pair: progress is "a claim after the last nudge".
CREATE INDEX IF NOT EXISTS stall_nudge_todos_claimed
    ON todos (endpoint_id, queue, claimed_at)
    WHERE claimed_at IS NOT NULL;

-- Unverified deliveries only (open-trust receivers): the sweep's sender-gate test
-- is "no unverified delivery with this id", a probe of this small index rather
-- than of every delivery (todos.delivery_id references deliveries(id)).
CREATE INDEX IF NOT EXISTS stall_nudge_deliveries_unverified
    ON deliveries (id)
    WHERE NOT verified;

-- Covering hooks of an endpoint.
CREATE INDEX IF NOT EXISTS stall_nudge_hooks_endpoint
    ON notify_hooks (endpoint_id)
    WHERE enabled;
