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

-- What changed since the last tick, so a tick looks at those pairs only (the full
-- pass, at a bounded interval, looks at every pair). One row per event, appended in
-- the host's own transaction, so it is visible exactly when the change is: a pending
-- todo created, requeued or moved into a pair (stamped with its created_at: the tick
-- looks once it is past the threshold), and a pair that lost a pending todo other
-- than by a claim, or lost its ledger row outside a sweep ('-infinity': look at once);
-- and, with queue NULL (every queue of the endpoint), an endpoint whose state, notify
-- hooks or deliveries' verification changed. Claims are in stall_nudge_claims. A
-- tick deletes the rows it has looked at.
CREATE TABLE IF NOT EXISTS stall_nudge_changes (
    endpoint_id text NOT NULL,
    queue       text NULL,
    look_after  timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS stall_nudge_changes_due
    ON stall_nudge_changes (look_after);

-- Pairs a tick found due but held back for the tick limit, with their oldest work:
-- the next tick walks them in charge order and stops after tick_limit, so a storm
-- of due pairs is not judged again whole on every tick.
CREATE TABLE IF NOT EXISTS stall_nudge_held (
    endpoint_id text NOT NULL,
    queue       text NOT NULL,
    todo_id     text NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (endpoint_id, queue)
);

CREATE INDEX IF NOT EXISTS stall_nudge_held_order
    ON stall_nudge_held (created_at, endpoint_id COLLATE "C", queue COLLATE "C");

-- When the fleet last ran a full pass (one row).
CREATE TABLE IF NOT EXISTS stall_nudge_sweeps (
    singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    full_pass_at timestamptz NOT NULL
);

-- Ledger rows by count and stamp: "whose backoff has ended" is one range scan per count.
CREATE INDEX IF NOT EXISTS stall_nudge_ledger_due
    ON queue_stall_nudges (nudges, last_nudged_at);

CREATE OR REPLACE FUNCTION stall_nudge_log_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.state = 'pending' THEN
        INSERT INTO stall_nudge_changes (endpoint_id, queue, look_after)
        VALUES (OLD.endpoint_id, OLD.queue, '-infinity');
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.state = 'pending' THEN
        INSERT INTO stall_nudge_changes (endpoint_id, queue, look_after)
        VALUES (NEW.endpoint_id, NEW.queue, NEW.created_at);
    END IF;
    RETURN NULL;
END
$$;

-- An endpoint's configuration changed (its state, a hook, a delivery's verification):
-- every queue of it is judged at the next tick. TG_ARGV[0] names the endpoint column.
-- These tables are written rarely; the host's hot writes (a delivery received, a
-- hook's failure count) do not fire it.
CREATE OR REPLACE FUNCTION stall_nudge_log_endpoint_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO stall_nudge_changes (endpoint_id, queue, look_after)
        VALUES (to_jsonb(OLD) ->> TG_ARGV[0], NULL, '-infinity');
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO stall_nudge_changes (endpoint_id, queue, look_after)
        VALUES (to_jsonb(NEW) ->> TG_ARGV[0], NULL, '-infinity');
    END IF;
    RETURN NULL;
END
$$;

-- A ledger row deleted outside a sweep (by hand, or by an older build): its pair's
-- next nudge is a first one, so the next tick looks at it. A sweep's own deletions
-- are drains, which need no second look; it marks its transaction to skip this.
CREATE OR REPLACE FUNCTION stall_nudge_log_ledger_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('stall_nudge.sweeping', true), '') <> 'on' THEN
        INSERT INTO stall_nudge_changes (endpoint_id, queue, look_after)
        SELECT gone.endpoint_id, gone.queue, '-infinity' FROM gone;
    END IF;
    RETURN NULL;
END
$$;

-- Each trigger's WHEN keeps the host's common writes free of it: a claim (logged as
-- a claim), a completion and any write that leaves the pending set alone.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = 'todos'::regclass AND tgname = 'stall_nudge_log_created') THEN
        CREATE TRIGGER stall_nudge_log_created
            AFTER INSERT ON todos
            FOR EACH ROW
            WHEN (NEW.state = 'pending')
            EXECUTE FUNCTION stall_nudge_log_change();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = 'todos'::regclass AND tgname = 'stall_nudge_log_moved') THEN
        CREATE TRIGGER stall_nudge_log_moved
            AFTER UPDATE OF state, endpoint_id, queue, created_at, delivery_id ON todos
            FOR EACH ROW
            WHEN ((OLD.state = 'pending' OR NEW.state = 'pending')
                  AND (OLD.state, OLD.endpoint_id, OLD.queue, OLD.created_at, OLD.delivery_id)
                      IS DISTINCT FROM
                      (NEW.state, NEW.endpoint_id, NEW.queue, NEW.created_at, NEW.delivery_id)
                  AND NOT (OLD.state = 'pending' AND NEW.state <> 'pending'
                           AND NEW.claimed_at IS DISTINCT FROM OLD.claimed_at
                           AND NEW.endpoint_id = OLD.endpoint_id AND NEW.queue = OLD.queue))
            EXECUTE FUNCTION stall_nudge_log_change();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = 'todos'::regclass AND tgname = 'stall_nudge_log_deleted') THEN
        CREATE TRIGGER stall_nudge_log_deleted
            AFTER DELETE ON todos
            FOR EACH ROW
            WHEN (OLD.state = 'pending')
            EXECUTE FUNCTION stall_nudge_log_change();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = 'endpoints'::regclass
                      AND tgname = 'stall_nudge_log_endpoint_state') THEN
        CREATE TRIGGER stall_nudge_log_endpoint_state
            AFTER UPDATE OF state ON endpoints
            FOR EACH ROW
            WHEN (OLD.state IS DISTINCT FROM NEW.state)
            EXECUTE FUNCTION stall_nudge_log_endpoint_change('id');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = 'notify_hooks'::regclass
                      AND tgname = 'stall_nudge_log_hook') THEN
        CREATE TRIGGER stall_nudge_log_hook
            AFTER INSERT OR DELETE OR UPDATE OF enabled, queues, endpoint_id ON notify_hooks
            FOR EACH ROW
            EXECUTE FUNCTION stall_nudge_log_endpoint_change('endpoint_id');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = 'deliveries'::regclass
                      AND tgname = 'stall_nudge_log_verified') THEN
        CREATE TRIGGER stall_nudge_log_verified
            AFTER UPDATE OF verified ON deliveries
            FOR EACH ROW
            WHEN (OLD.verified IS DISTINCT FROM NEW.verified)
            EXECUTE FUNCTION stall_nudge_log_endpoint_change('endpoint_id');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = 'queue_stall_nudges'::regclass
                      AND tgname = 'stall_nudge_log_ledger_delete') THEN
        CREATE TRIGGER stall_nudge_log_ledger_delete
            AFTER DELETE ON queue_stall_nudges
            REFERENCING OLD TABLE AS gone
            FOR EACH STATEMENT
            EXECUTE FUNCTION stall_nudge_log_ledger_delete();
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

-- A migration may have just restored a dropped table, which no trigger saw: the
-- fleet's next tick is a full pass, judging every pair.
DELETE FROM stall_nudge_sweeps;
