-- The migration of schema version 3 (main at 51f1c01), its rules expanded: what an earlier
-- build installed, for the upgrade tests. Generated once from that commit's migration.sql and
-- rules.sql; never edited by hand.

-- step: ledger
-- The nudge ledger: one row per pair nudged since it last had no work.
CREATE TABLE IF NOT EXISTS queue_stall_nudges (
    endpoint_id    text NOT NULL,
    queue          text NOT NULL,
    nudges         int NOT NULL,
    last_nudged_at timestamptz NOT NULL
);

-- step: ledger_constraints
-- nudges >= 0 (a refunded first nudge leaves 0; an earlier build required >= 1), and the
-- pair key moves from the names (a btree entry stops near 2.7 kB) to their md5.
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
    IF EXISTS (SELECT 1 FROM pg_constraint
                WHERE conrelid = 'queue_stall_nudges'::regclass
                  AND conname = 'queue_stall_nudges_pkey') THEN
        ALTER TABLE queue_stall_nudges DROP CONSTRAINT queue_stall_nudges_pkey;
    END IF;
END
$$;

-- step: ledger_pair
-- One ledger row per pair, whatever the length of its names.
CREATE UNIQUE INDEX IF NOT EXISTS stall_nudge_ledger_pair
    ON queue_stall_nudges (md5(endpoint_id), md5(queue));

-- step: ledger_due
-- Ledger rows by count and stamp: "whose backoff has ended" is one range scan per count.
CREATE INDEX IF NOT EXISTS stall_nudge_ledger_due
    ON queue_stall_nudges (nudges, last_nudged_at);

-- step: claims
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

-- step: claims_pair
-- A pair's claims, keyed by md5 of its names: the host's claim of a todo with a long
-- queue name must not fail here. (An earlier build keyed the names: dropped.)
CREATE INDEX IF NOT EXISTS stall_nudge_claims_key
    ON stall_nudge_claims (md5(endpoint_id), md5(queue), claimed_at);
DROP INDEX IF EXISTS stall_nudge_claims_pair;

-- step: claim_trigger_function
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

-- step: claim_triggers
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

-- step: changes
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

-- step: changes_due
-- Changes by the time the tick should look at them.
CREATE INDEX IF NOT EXISTS stall_nudge_changes_due
    ON stall_nudge_changes (look_after);

-- step: held
-- Pairs a tick found due but held back for the tick limit, with their oldest work:
-- the next tick walks them in charge order and stops after tick_limit, so a storm
-- of due pairs is not judged again whole on every tick.
CREATE TABLE IF NOT EXISTS stall_nudge_held (
    endpoint_id text NOT NULL,
    queue       text NOT NULL,
    todo_id     text NOT NULL,
    created_at  timestamptz NOT NULL
);

-- step: held_keys
-- One entry per pair, keyed by md5 of its names; walked by created_at (ties sorted
-- on the few entries that share it). An earlier build keyed the names: dropped.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint
                WHERE conrelid = 'stall_nudge_held'::regclass
                  AND conname = 'stall_nudge_held_pkey') THEN
        ALTER TABLE stall_nudge_held DROP CONSTRAINT stall_nudge_held_pkey;
    END IF;
END
$$;
CREATE UNIQUE INDEX IF NOT EXISTS stall_nudge_held_pair
    ON stall_nudge_held (md5(endpoint_id), md5(queue));
CREATE INDEX IF NOT EXISTS stall_nudge_held_due
    ON stall_nudge_held (created_at);
DROP INDEX IF EXISTS stall_nudge_held_order;

-- step: sweeps
-- When the fleet last ran a full pass (one row).
CREATE TABLE IF NOT EXISTS stall_nudge_sweeps (
    singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    full_pass_at timestamptz NOT NULL
);

-- step: change_function
-- A pending todo entered or left a pair other than by a claim (trigger function).
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

-- step: endpoint_change_function
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

-- step: ledger_delete_function
-- A ledger row deleted outside a sweep (by hand, or by an older build): its pair's
-- next nudge is a first one, so a tick looks at it, stamped with its oldest pending
-- todo past the gate (no work can be older; none: nothing to look at). A sweep's own
-- deletions are drains, which need no second look; it marks its transaction to skip this.
CREATE OR REPLACE FUNCTION stall_nudge_log_ledger_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('stall_nudge.sweeping', true), '') <> 'on' THEN
        INSERT INTO stall_nudge_changes (endpoint_id, queue, look_after)
        SELECT gone.endpoint_id, gone.queue, o.look_after
          FROM gone
         CROSS JOIN LATERAL (
                SELECT LEAST((SELECT pending_s.created_at FROM todos pending_s
        WHERE pending_s.endpoint_id::text = gone.endpoint_id AND pending_s.queue = gone.queue
          AND pending_s.state = 'pending' AND (octet_length(pending_s.endpoint_id::text) + octet_length(pending_s.queue)
 + octet_length(pending_s.id::text) + coalesce(octet_length(pending_s.delivery_id::text), 0) <= 2000)
          AND (pending_s.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = pending_s.delivery_id AND gate_d.verified))
        ORDER BY pending_s.created_at
        LIMIT 1),
      (SELECT pending_l.created_at FROM todos pending_l
        WHERE (md5(pending_l.endpoint_id::text) = md5(gone.endpoint_id::text) AND md5(pending_l.queue) = md5(gone.queue::text)
 AND pending_l.endpoint_id::text = gone.endpoint_id AND pending_l.queue = gone.queue)
          AND pending_l.state = 'pending' AND (octet_length(pending_l.endpoint_id::text) + octet_length(pending_l.queue)
 + octet_length(pending_l.id::text) + coalesce(octet_length(pending_l.delivery_id::text), 0) > 2000)
          AND (pending_l.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = pending_l.delivery_id AND gate_d.verified))
        ORDER BY pending_l.created_at
        LIMIT 1)) AS look_after) o
         WHERE o.look_after IS NOT NULL;
    END IF;
    RETURN NULL;
END
$$;

-- step: change_triggers
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
    -- A pending todo moved (another pair, created_at or delivery): the columns a claim
    -- does not set, so a claim never tests this WHEN.
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = 'todos'::regclass AND tgname = 'stall_nudge_log_moved_todo') THEN
        CREATE TRIGGER stall_nudge_log_moved_todo
            AFTER UPDATE OF endpoint_id, queue, created_at, delivery_id ON todos
            FOR EACH ROW
            WHEN (OLD.state = 'pending' OR NEW.state = 'pending')
            EXECUTE FUNCTION stall_nudge_log_change();
    END IF;
    -- A todo entered or left the pending set other than by a claim (a claim changes
    -- claimed_at and is logged as a claim). A claim tests this short WHEN only: every
    -- WHEN is compiled once per statement, and the host's claims are one-row statements.
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = 'todos'::regclass AND tgname = 'stall_nudge_log_state') THEN
        CREATE TRIGGER stall_nudge_log_state
            AFTER UPDATE OF state ON todos
            FOR EACH ROW
            WHEN ((OLD.state = 'pending') <> (NEW.state = 'pending')
                  AND NEW.claimed_at IS NOT DISTINCT FROM OLD.claimed_at)
            EXECUTE FUNCTION stall_nudge_log_change();
    END IF;
    -- An earlier build's one trigger for both, whose long WHEN every claim paid for.
    IF EXISTS (SELECT 1 FROM pg_trigger
                WHERE tgrelid = 'todos'::regclass AND tgname = 'stall_nudge_log_moved') THEN
        DROP TRIGGER stall_nudge_log_moved ON todos;
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

-- step: host_index_todos_pending_short
-- Pending todos in pair order, oldest first: the full pass's skip scan over pairs
-- walks it, and its first entry per pair is that pair's oldest pending todo; each
-- judged pair's oldest work is one descent. id sorts by code point so ties break as
-- the pure core breaks them. Ids by their text form (the column itself on a text
-- host); endpoint_id and queue use text_pattern_ops (byte-wise order, the sweep's
-- ~<~ / ~>~): the skip scan compares on every entry of each page it lands on, and
-- equality lookups (=) in the database's collation still use the index. INCLUDE
-- delivery_id lets the sweep test the sender gate from the index alone. Only todos
-- whose names fit an entry (rule short_names in rules.sql): a longer one is in
-- stall_nudge_todos_pending_long, so no host write is refused for its length.
CREATE INDEX IF NOT EXISTS stall_nudge_todos_pending_short
    ON todos ((endpoint_id::text) text_pattern_ops, queue text_pattern_ops, created_at,
              (id::text) COLLATE "C")
    INCLUDE (delivery_id)
    WHERE state = 'pending'
      AND octet_length(endpoint_id::text) + octet_length(queue) + octet_length(id::text)
          + coalesce(octet_length(delivery_id::text), 0) <= 2000;

-- step: host_index_todos_pending_long
-- Pending todos whose names are too long for the short index (rule long_names), keyed
-- by md5 of the pair's names, oldest first: fixed-size entries that cannot fail.
CREATE INDEX IF NOT EXISTS stall_nudge_todos_pending_long
    ON todos (md5(endpoint_id::text), md5(queue), created_at)
    WHERE state = 'pending'
      AND octet_length(endpoint_id::text) + octet_length(queue) + octet_length(id::text)
          + coalesce(octet_length(delivery_id::text), 0) > 2000;

-- step: host_index_deliveries_unverified
-- Unverified deliveries only (open-trust receivers): the sweep's sender-gate test
-- is "no unverified delivery with this id", a probe of this small index rather
-- than of every delivery (todos.delivery_id references deliveries(id)).
CREATE INDEX IF NOT EXISTS stall_nudge_deliveries_unverified
    ON deliveries (id)
    WHERE NOT verified;

-- step: host_index_hooks_endpoint
-- Covering hooks of an endpoint, by the endpoint id's text form.
CREATE INDEX IF NOT EXISTS stall_nudge_hooks_endpoint
    ON notify_hooks ((endpoint_id::text))
    WHERE enabled;

-- step: host_index_endpoints_key
-- Endpoints by their id's text form: only on a host whose ids are not text (a text
-- host's primary key already serves), so "is the endpoint active" is one descent.
CREATE INDEX IF NOT EXISTS stall_nudge_endpoints_key
    ON endpoints ((id::text));

-- step: retired_indexes
-- Indexes of earlier builds this build never reads: the pending index that keyed
-- names of any length (replaced by the two above), and the claimed-todos index that
-- builds before the claim log probed. Dropping one locks todos for a moment.
DROP INDEX IF EXISTS stall_nudge_todos_pending;
DROP INDEX IF EXISTS stall_nudge_todos_claimed;

-- step: schema_version
-- Which version of this schema the database holds, so a later release knows what
-- to upgrade (stall-nudge migrate --check compares it with the build's).
CREATE TABLE IF NOT EXISTS stall_nudge_schema (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version     int NOT NULL,
    migrated_at timestamptz NOT NULL
);
INSERT INTO stall_nudge_schema AS s (version, migrated_at) VALUES (3, now())
ON CONFLICT (singleton) DO UPDATE SET version = EXCLUDED.version, migrated_at = EXCLUDED.migrated_at
 WHERE s.version IS DISTINCT FROM EXCLUDED.version;

-- step: next_tick_full_pass
-- A migration may have just restored a dropped table, which no trigger saw: the
-- fleet's next tick is a full pass, judging every pair.
DELETE FROM stall_nudge_sweeps;
