-- statement: 0004_baseline.ledger
-- The nudge ledger: one row per pair nudged since it last had no work.
CREATE TABLE IF NOT EXISTS queue_stall_nudges (
    endpoint_id    text NOT NULL,
    queue          text NOT NULL,
    nudges         int NOT NULL,
    last_nudged_at timestamptz NOT NULL
);

-- statement: 0004_baseline.ledger_constraints
-- nudges >= 0 (a refunded first nudge leaves 0), and no primary key on the names: a
-- btree entry stops near 2.7 kB, so the pair is keyed by the md5 of each name (next
-- step). A ledger an earlier build made had either constraint: changed here.
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

-- statement: 0004_baseline.ledger_indexes
-- One ledger row per pair whatever the length of its names; rows by count and stamp,
-- so "whose backoff has ended" is one range scan per count.
CREATE UNIQUE INDEX IF NOT EXISTS stall_nudge_ledger_pair
    ON queue_stall_nudges (md5(endpoint_id), md5(queue));
CREATE INDEX IF NOT EXISTS stall_nudge_ledger_due
    ON queue_stall_nudges (nudges, last_nudged_at);

-- statement: 0004_baseline.settings
-- The footprint this database has (docs/host-schema.md): lean, no trigger on the
-- host's tables; incremental, triggers that log what changed so a tick costs what
-- changed. Set by migrate --footprint; a plain migrate keeps it.
CREATE TABLE IF NOT EXISTS stall_nudge.settings (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    footprint  text NOT NULL CHECK (footprint IN ('lean', 'incremental')),
    changed_at timestamptz NOT NULL
);
INSERT INTO stall_nudge.settings (footprint, changed_at)
SELECT CASE WHEN to_regclass('stall_nudge_claims') IS NOT NULL THEN 'incremental'
            ELSE 'lean' END,
       now()
ON CONFLICT (singleton) DO NOTHING;

-- statement: 0004_baseline.objects
-- Every object migrate made or relies on (a host's own index that fits), with its
-- definition as the catalog printed it then: migrate --check compares, uninstall
-- removes only what is ours.
CREATE TABLE IF NOT EXISTS stall_nudge.objects (
    kind       text NOT NULL,
    name       text NOT NULL,
    on_table   text NOT NULL DEFAULT '',
    ours       boolean NOT NULL,
    definition text NOT NULL,
    PRIMARY KEY (kind, name, on_table)
);

-- statement: 0004_baseline.sweeps
-- The fleet's record (one row): when it last swept and at what interval, and when its
-- last full pass ran and how long it took (database time).
CREATE TABLE IF NOT EXISTS stall_nudge.sweeps (
    singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    swept_at     timestamptz NOT NULL,
    interval_ms  bigint NULL,
    full_pass_at timestamptz NULL,
    full_pass_ms double precision NULL
);

-- statement: 0004_baseline.claims
-- The claim log (fed in the incremental footprint; empty in the lean one): a claim
-- no charge consumed yet. It adds commit order to the host's timestamps: a claim
-- stamped before a charge read the time may commit after the charge looked; its row
-- here becomes visible exactly when the claim does, so it counts at the next tick.
CREATE TABLE IF NOT EXISTS stall_nudge.claims (
    endpoint_id text NOT NULL,
    queue       text NOT NULL,
    claimed_at  timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS claims_pair ON stall_nudge.claims (md5(endpoint_id), md5(queue), claimed_at);

-- statement: 0004_baseline.changes
-- What changed since the last tick (fed in the incremental footprint), so a tick
-- judges those pairs only: a pending todo created, requeued or moved into a pair
-- (stamped with its created_at: the tick looks once it is past the threshold); a pair
-- that lost a pending todo other than by a claim, or lost its ledger row outside a
-- sweep; and, with queue NULL, an endpoint whose state, hooks or deliveries'
-- verification changed ('-infinity': look at once). A tick deletes what it judged.
CREATE TABLE IF NOT EXISTS stall_nudge.changes (
    endpoint_id text NOT NULL,
    queue       text NULL,
    look_after  timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS changes_due ON stall_nudge.changes (look_after);

-- statement: 0004_baseline.held
-- Pairs a tick found due but held back for the tick limit, with their oldest work:
-- the next usual tick walks the best tick_limit of them in charge order.
CREATE TABLE IF NOT EXISTS stall_nudge.held (
    endpoint_id text NOT NULL,
    queue       text NOT NULL,
    todo_id     text NOT NULL,
    created_at  timestamptz NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS held_pair ON stall_nudge.held (md5(endpoint_id), md5(queue));
CREATE INDEX IF NOT EXISTS held_due ON stall_nudge.held (created_at);

-- statement: host_indexes.stall_nudge_pending
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_pending
    ON todos (endpoint_id, queue, created_at)
    WHERE todos.state = 'pending' AND (octet_length(todos.endpoint_id::text) + octet_length(todos.queue) <= 2000)

-- statement: host_indexes.stall_nudge_pending_long
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_pending_long
    ON todos (md5(endpoint_id::text), md5(queue), created_at)
    WHERE todos.state = 'pending' AND (octet_length(todos.endpoint_id::text) + octet_length(todos.queue) > 2000)

-- statement: host_indexes.stall_nudge_claimed
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_claimed
    ON todos (endpoint_id, queue, claimed_at)
    WHERE todos.claimed_at IS NOT NULL AND (octet_length(todos.endpoint_id::text) + octet_length(todos.queue) <= 2000)

-- statement: host_indexes.stall_nudge_claimed_long
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_claimed_long
    ON todos (md5(endpoint_id::text), md5(queue), claimed_at)
    WHERE todos.claimed_at IS NOT NULL AND (octet_length(todos.endpoint_id::text) + octet_length(todos.queue) > 2000)

-- statement: host_indexes.stall_nudge_hooks
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_hooks
    ON notify_hooks (endpoint_id)
    WHERE notify_hooks.enabled

-- statement: footprint_incremental.log_claim
-- A claim (claimed_at set or changed) is logged in the claiming transaction, so it
-- becomes visible exactly when the claim does.
CREATE OR REPLACE FUNCTION stall_nudge.log_claim() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF to_regclass('stall_nudge.claims') IS NOT NULL THEN
        INSERT INTO stall_nudge.claims (endpoint_id, queue, claimed_at)
        VALUES (NEW.endpoint_id::text, NEW.queue, NEW.claimed_at);
    END IF;
    RETURN NULL;
END
$$;

-- statement: footprint_incremental.log_change
-- A pending todo entered or left a pair other than by a claim.
CREATE OR REPLACE FUNCTION stall_nudge.log_change() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF to_regclass('stall_nudge.changes') IS NULL THEN
        RETURN NULL;
    END IF;
    IF TG_OP <> 'INSERT' AND OLD.state = 'pending' THEN
        INSERT INTO stall_nudge.changes (endpoint_id, queue, look_after)
        VALUES (OLD.endpoint_id::text, OLD.queue, '-infinity');
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.state = 'pending' THEN
        INSERT INTO stall_nudge.changes (endpoint_id, queue, look_after)
        VALUES (NEW.endpoint_id::text, NEW.queue, NEW.created_at);
    END IF;
    RETURN NULL;
END
$$;

-- statement: footprint_incremental.log_endpoint_change
-- An endpoint's configuration changed (its state, a hook, a delivery's verification):
-- every queue of it is judged at the next tick. TG_ARGV[0] names the endpoint column.
CREATE OR REPLACE FUNCTION stall_nudge.log_endpoint_change() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF to_regclass('stall_nudge.changes') IS NULL THEN
        RETURN NULL;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO stall_nudge.changes (endpoint_id, queue, look_after)
        VALUES (to_jsonb(OLD) ->> TG_ARGV[0], NULL, '-infinity');
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO stall_nudge.changes (endpoint_id, queue, look_after)
        VALUES (to_jsonb(NEW) ->> TG_ARGV[0], NULL, '-infinity');
    END IF;
    RETURN NULL;
END
$$;

-- statement: footprint_incremental.log_ledger_delete
-- A ledger row deleted outside a sweep (by hand, or an older build): its pair's next
-- nudge is a first one, so a tick looks at it, stamped with its oldest pending todo
-- past the gate (no work can be older; none: nothing to look at). A sweep's own
-- deletions are drains and need no second look: it marks its transaction.
CREATE OR REPLACE FUNCTION stall_nudge.log_ledger_delete() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF coalesce(current_setting('stall_nudge.sweeping', true), '') <> 'on'
       AND to_regclass('stall_nudge.changes') IS NOT NULL THEN
        INSERT INTO stall_nudge.changes (endpoint_id, queue, look_after)
        SELECT gone.endpoint_id, gone.queue, o.look_after
          FROM gone
         CROSS JOIN LATERAL (SELECT (json_populate_record(NULL::endpoints, json_build_object('id', gone.endpoint_id::text))).id AS key) k
         CROSS JOIN LATERAL (
                SELECT LEAST((SELECT pending_s.created_at FROM todos pending_s
        WHERE pending_s.endpoint_id = k.key AND pending_s.queue = gone.queue
          AND pending_s.state = 'pending' AND (octet_length(pending_s.endpoint_id::text) + octet_length(pending_s.queue) <= 2000)
          AND (pending_s.delivery_id IS NULL
 OR EXISTS (SELECT 1 FROM deliveries gate_d
             WHERE gate_d.id = pending_s.delivery_id AND gate_d.verified))
        ORDER BY pending_s.created_at
        LIMIT 1),
      (SELECT pending_l.created_at FROM todos pending_l
        WHERE (md5(pending_l.endpoint_id::text) = md5(gone.endpoint_id::text) AND md5(pending_l.queue) = md5(gone.queue::text)
 AND pending_l.endpoint_id::text = gone.endpoint_id AND pending_l.queue = gone.queue)
          AND pending_l.state = 'pending' AND (octet_length(pending_l.endpoint_id::text) + octet_length(pending_l.queue) > 2000)
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

-- statement: footprint_incremental.log_truncate
-- A host table (or the ledger) was truncated: no row trigger saw what went, so the
-- fleet's next tick is a full pass.
CREATE OR REPLACE FUNCTION stall_nudge.log_truncate() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$
BEGIN
    IF to_regclass('stall_nudge.sweeps') IS NOT NULL THEN
        UPDATE stall_nudge.sweeps SET full_pass_at = NULL;
    END IF;
    RETURN NULL;
END
$$;

-- statement: footprint_incremental.triggers
-- Each trigger's WHEN keeps the host's common writes free of it: a claim fires only
-- the claim log, a completion and any write that leaves the pending set alone fire
-- nothing. The claim and state triggers name no column, so a claim a host's own
-- BEFORE trigger stamps is seen too.
CREATE OR REPLACE TRIGGER stall_nudge_claim
    AFTER UPDATE ON todos
    FOR EACH ROW
    WHEN (NEW.claimed_at IS NOT NULL AND NEW.claimed_at IS DISTINCT FROM OLD.claimed_at)
    EXECUTE FUNCTION stall_nudge.log_claim();
CREATE OR REPLACE TRIGGER stall_nudge_claimed_insert
    AFTER INSERT ON todos
    FOR EACH ROW
    WHEN (NEW.claimed_at IS NOT NULL)
    EXECUTE FUNCTION stall_nudge.log_claim();
CREATE OR REPLACE TRIGGER stall_nudge_created
    AFTER INSERT ON todos
    FOR EACH ROW
    WHEN (NEW.state = 'pending')
    EXECUTE FUNCTION stall_nudge.log_change();
CREATE OR REPLACE TRIGGER stall_nudge_moved
    AFTER UPDATE OF endpoint_id, queue, created_at, delivery_id ON todos
    FOR EACH ROW
    WHEN (OLD.state = 'pending' OR NEW.state = 'pending')
    EXECUTE FUNCTION stall_nudge.log_change();
CREATE OR REPLACE TRIGGER stall_nudge_state
    AFTER UPDATE ON todos
    FOR EACH ROW
    WHEN ((OLD.state = 'pending') <> (NEW.state = 'pending')
          AND NEW.claimed_at IS NOT DISTINCT FROM OLD.claimed_at)
    EXECUTE FUNCTION stall_nudge.log_change();
CREATE OR REPLACE TRIGGER stall_nudge_deleted
    AFTER DELETE ON todos
    FOR EACH ROW
    WHEN (OLD.state = 'pending')
    EXECUTE FUNCTION stall_nudge.log_change();
CREATE OR REPLACE TRIGGER stall_nudge_endpoint_state
    AFTER UPDATE OF state ON endpoints
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION stall_nudge.log_endpoint_change('id');
CREATE OR REPLACE TRIGGER stall_nudge_hook
    AFTER INSERT OR DELETE OR UPDATE OF enabled, queues, endpoint_id ON notify_hooks
    FOR EACH ROW
    EXECUTE FUNCTION stall_nudge.log_endpoint_change('endpoint_id');
CREATE OR REPLACE TRIGGER stall_nudge_verified
    AFTER UPDATE OF verified ON deliveries
    FOR EACH ROW
    WHEN (OLD.verified IS DISTINCT FROM NEW.verified)
    EXECUTE FUNCTION stall_nudge.log_endpoint_change('endpoint_id');
CREATE OR REPLACE TRIGGER stall_nudge_ledger_delete
    AFTER DELETE ON queue_stall_nudges
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT
    EXECUTE FUNCTION stall_nudge.log_ledger_delete();
CREATE OR REPLACE TRIGGER stall_nudge_truncated
    AFTER TRUNCATE ON todos
    FOR EACH STATEMENT
    EXECUTE FUNCTION stall_nudge.log_truncate();
CREATE OR REPLACE TRIGGER stall_nudge_truncated
    AFTER TRUNCATE ON endpoints
    FOR EACH STATEMENT
    EXECUTE FUNCTION stall_nudge.log_truncate();
CREATE OR REPLACE TRIGGER stall_nudge_truncated
    AFTER TRUNCATE ON deliveries
    FOR EACH STATEMENT
    EXECUTE FUNCTION stall_nudge.log_truncate();
CREATE OR REPLACE TRIGGER stall_nudge_truncated
    AFTER TRUNCATE ON notify_hooks
    FOR EACH STATEMENT
    EXECUTE FUNCTION stall_nudge.log_truncate();
CREATE OR REPLACE TRIGGER stall_nudge_truncated
    AFTER TRUNCATE ON queue_stall_nudges
    FOR EACH STATEMENT
    EXECUTE FUNCTION stall_nudge.log_truncate();

-- statement: footprint_lean.triggers
-- Every trigger of the incremental footprint.
DROP TRIGGER IF EXISTS stall_nudge_claim ON todos;
DROP TRIGGER IF EXISTS stall_nudge_claimed_insert ON todos;
DROP TRIGGER IF EXISTS stall_nudge_created ON todos;
DROP TRIGGER IF EXISTS stall_nudge_moved ON todos;
DROP TRIGGER IF EXISTS stall_nudge_state ON todos;
DROP TRIGGER IF EXISTS stall_nudge_deleted ON todos;
DROP TRIGGER IF EXISTS stall_nudge_endpoint_state ON endpoints;
DROP TRIGGER IF EXISTS stall_nudge_hook ON notify_hooks;
DROP TRIGGER IF EXISTS stall_nudge_verified ON deliveries;
DROP TRIGGER IF EXISTS stall_nudge_ledger_delete ON queue_stall_nudges;
DROP TRIGGER IF EXISTS stall_nudge_truncated ON todos;
DROP TRIGGER IF EXISTS stall_nudge_truncated ON endpoints;
DROP TRIGGER IF EXISTS stall_nudge_truncated ON deliveries;
DROP TRIGGER IF EXISTS stall_nudge_truncated ON notify_hooks;
DROP TRIGGER IF EXISTS stall_nudge_truncated ON queue_stall_nudges;

-- statement: footprint_lean.functions
-- The triggers' functions.
DROP FUNCTION IF EXISTS stall_nudge.log_claim();
DROP FUNCTION IF EXISTS stall_nudge.log_change();
DROP FUNCTION IF EXISTS stall_nudge.log_endpoint_change();
DROP FUNCTION IF EXISTS stall_nudge.log_ledger_delete();
DROP FUNCTION IF EXISTS stall_nudge.log_truncate();

-- statement: footprint_lean.fold_claims
-- A logged claim of a pair with a ledger row is progress no charge has consumed yet:
-- its next nudge is nudge 1, due at once, exactly as for a pair with no row. Deleting
-- the row keeps that in the ledger itself; the log is then empty.
DELETE FROM queue_stall_nudges n
 WHERE EXISTS (SELECT 1 FROM stall_nudge.claims c WHERE (md5(c.endpoint_id) = md5(n.endpoint_id::text) AND md5(c.queue) = md5(n.queue::text)
 AND c.endpoint_id = n.endpoint_id AND c.queue = n.queue));
DELETE FROM stall_nudge.claims;

-- statement: footprint_lean.clear_hints
-- What the triggers logged for the usual tick: no lean tick reads it.
DELETE FROM stall_nudge.changes;
DELETE FROM stall_nudge.held;

-- statement: earlier_builds.fold_claims
-- Claims an earlier build logged that no charge consumed yet move into our log, so no
-- claim made before the upgrade is lost.
INSERT INTO stall_nudge.claims (endpoint_id, queue, claimed_at)
SELECT endpoint_id, queue, claimed_at FROM stall_nudge_claims;

-- statement: uninstall.triggers
-- Our triggers on the host's tables, of this build and of earlier ones.
DROP TRIGGER IF EXISTS stall_nudge_claim ON todos;
DROP TRIGGER IF EXISTS stall_nudge_claimed_insert ON todos;
DROP TRIGGER IF EXISTS stall_nudge_created ON todos;
DROP TRIGGER IF EXISTS stall_nudge_moved ON todos;
DROP TRIGGER IF EXISTS stall_nudge_state ON todos;
DROP TRIGGER IF EXISTS stall_nudge_deleted ON todos;
DROP TRIGGER IF EXISTS stall_nudge_truncated ON todos;
DROP TRIGGER IF EXISTS stall_nudge_endpoint_state ON endpoints;
DROP TRIGGER IF EXISTS stall_nudge_truncated ON endpoints;
DROP TRIGGER IF EXISTS stall_nudge_hook ON notify_hooks;
DROP TRIGGER IF EXISTS stall_nudge_truncated ON notify_hooks;
DROP TRIGGER IF EXISTS stall_nudge_verified ON deliveries;
DROP TRIGGER IF EXISTS stall_nudge_truncated ON deliveries;
DROP TRIGGER IF EXISTS stall_nudge_log_claim ON todos;
DROP TRIGGER IF EXISTS stall_nudge_log_claimed_insert ON todos;
DROP TRIGGER IF EXISTS stall_nudge_log_created ON todos;
DROP TRIGGER IF EXISTS stall_nudge_log_moved_todo ON todos;
DROP TRIGGER IF EXISTS stall_nudge_log_moved ON todos;
DROP TRIGGER IF EXISTS stall_nudge_log_state ON todos;
DROP TRIGGER IF EXISTS stall_nudge_log_deleted ON todos;
DROP TRIGGER IF EXISTS stall_nudge_log_endpoint_state ON endpoints;
DROP TRIGGER IF EXISTS stall_nudge_log_hook ON notify_hooks;
DROP TRIGGER IF EXISTS stall_nudge_log_verified ON deliveries;

-- statement: uninstall.earlier_functions
-- An earlier build's trigger functions and tables, in the host's schema.
DROP FUNCTION IF EXISTS stall_nudge_log_claim();
DROP FUNCTION IF EXISTS stall_nudge_log_change();
DROP FUNCTION IF EXISTS stall_nudge_log_endpoint_change();
DROP FUNCTION IF EXISTS stall_nudge_log_ledger_delete();
DROP TABLE IF EXISTS stall_nudge_claims, stall_nudge_changes, stall_nudge_held,
                     stall_nudge_sweeps, stall_nudge_schema;

-- statement: uninstall.ledger
-- The nudge ledger (its triggers and indexes go with it).
DROP TABLE IF EXISTS queue_stall_nudges;

-- statement: uninstall.schema
-- Our schema: its tables, functions, and the record of what migrate did.
DROP SCHEMA IF EXISTS stall_nudge CASCADE;

