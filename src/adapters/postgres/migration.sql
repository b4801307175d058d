-- What stall-nudge owns: the nudge ledger, and the indexes its sweep needs on
-- the host's tables. Idempotent: every object is created IF NOT EXISTS.

CREATE TABLE IF NOT EXISTS queue_stall_nudges (
    endpoint_id    text NOT NULL,
    queue          text NOT NULL,
    nudges         int NOT NULL,
    last_nudged_at timestamptz NOT NULL,
    PRIMARY KEY (endpoint_id, queue)
);

-- nudges counts nudges that reached a receiver: 0 after a refunded first nudge.
-- An earlier build required nudges >= 1 (constraint queue_stall_nudges_nudges_check).
-- Altered only when needed: ALTER TABLE locks out the sweep while it runs.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint
                WHERE conrelid = 'queue_stall_nudges'::regclass
                  AND conname = 'queue_stall_nudges_nudges_check') THEN
        ALTER TABLE queue_stall_nudges DROP CONSTRAINT queue_stall_nudges_nudges_check;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'queue_stall_nudges'::regclass
                      AND conname = 'stall_nudge_nudges_not_negative') THEN
        ALTER TABLE queue_stall_nudges
            ADD CONSTRAINT stall_nudge_nudges_not_negative CHECK (nudges >= 0);
    END IF;
END
$$;

-- The progress log: one row per claim not yet absorbed by a charge. Progress is
-- "a claim in the pair after the last nudge" in commit order: a charge absorbs
-- (deletes) exactly the claims its snapshot sees, so a claim counts once, and a
-- claim whose transaction commits after the charge looked is still here for the
-- next one. Timestamps cannot say that: a claim stamped before a charge's "now"
-- may commit after the charge's snapshot.
CREATE TABLE IF NOT EXISTS stall_nudge_claims (
    endpoint_id text NOT NULL,
    queue       text NOT NULL,
    claimed_at  timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS stall_nudge_claims_pair
    ON stall_nudge_claims (endpoint_id, queue, claimed_at);

-- Every claim the host makes (claimed_at set or changed) is logged in the claiming
-- transaction, so it becomes visible exactly when the claim does.
CREATE OR REPLACE FUNCTION stall_nudge_log_claim() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO stall_nudge_claims (endpoint_id, queue, claimed_at)
    VALUES (NEW.endpoint_id, NEW.queue, NEW.claimed_at);
    RETURN NULL;
END
$$;

-- Created only when missing: CREATE (OR REPLACE) TRIGGER locks out the host's
-- writes to todos while it runs, and migrate may run on a busy host.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = 'todos'::regclass AND tgname = 'stall_nudge_log_claim') THEN
        CREATE TRIGGER stall_nudge_log_claim
            AFTER UPDATE OF claimed_at ON todos
            FOR EACH ROW
            WHEN (NEW.claimed_at IS NOT NULL AND NEW.claimed_at IS DISTINCT FROM OLD.claimed_at)
            EXECUTE FUNCTION stall_nudge_log_claim();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = 'todos'::regclass
                      AND tgname = 'stall_nudge_log_claimed_insert') THEN
        CREATE TRIGGER stall_nudge_log_claimed_insert
            AFTER INSERT ON todos
            FOR EACH ROW
            WHEN (NEW.claimed_at IS NOT NULL)
            EXECUTE FUNCTION stall_nudge_log_claim();
    END IF;
END
$$;

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

-- Latest claim per pair: how builds before the claim log probed progress. This
-- build never reads it; it stays while an older build may still sweep in a deploy.
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
