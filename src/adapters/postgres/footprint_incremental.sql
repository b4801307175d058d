-- The incremental footprint: triggers on the host's tables that log what changed, so
-- a tick judges only those pairs (and a full pass every FULL_PASS_INTERVAL repairs
-- what they cannot see). migrate --footprint incremental installs it, in migrate's
-- transaction; --footprint lean removes it (footprint_lean.sql).
--
-- No host write can fail because of us: every function runs with the rights of the
-- role that migrated (SECURITY DEFINER; host roles need no grant on our tables), with
-- a pinned search_path (pg_catalog, the host's schema @host_schema@, pg_temp last),
-- and skips a log table dropped by hand (the sweep, status and migrate --check say
-- so). Dropping the schema stall_nudge drops the functions and their triggers with it.

-- name: log_claim
-- A claim (claimed_at set or changed) is logged in the claiming transaction, so it
-- becomes visible exactly when the claim does.
CREATE OR REPLACE FUNCTION stall_nudge.log_claim() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, @host_schema@, pg_temp
AS $$
BEGIN
    IF to_regclass('stall_nudge.claims') IS NOT NULL THEN
        INSERT INTO stall_nudge.claims (endpoint_id, queue, claimed_at)
        VALUES (NEW.endpoint_id::text, NEW.queue, NEW.claimed_at);
    END IF;
    RETURN NULL;
END
$$;

-- name: log_change
-- A pending todo entered or left a pair other than by a claim.
CREATE OR REPLACE FUNCTION stall_nudge.log_change() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, @host_schema@, pg_temp
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

-- name: log_endpoint_change
-- An endpoint's configuration changed (its state, a hook, a delivery's verification):
-- every queue of it is judged at the next tick. TG_ARGV[0] names the endpoint column.
CREATE OR REPLACE FUNCTION stall_nudge.log_endpoint_change() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, @host_schema@, pg_temp
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

-- name: log_ledger_delete
-- A ledger row deleted outside a sweep (by hand, or an older build): its pair's next
-- nudge is a first one, so a tick looks at it, stamped with its oldest pending todo
-- past the gate (no work can be older; none: nothing to look at). A sweep's own
-- deletions are drains and need no second look: it marks its transaction.
CREATE OR REPLACE FUNCTION stall_nudge.log_ledger_delete() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, @host_schema@, pg_temp
AS $$
BEGIN
    IF coalesce(current_setting('stall_nudge.sweeping', true), '') <> 'on'
       AND to_regclass('stall_nudge.changes') IS NOT NULL THEN
        INSERT INTO stall_nudge.changes (endpoint_id, queue, look_after)
        SELECT gone.endpoint_id, gone.queue, o.look_after
          FROM gone
         CROSS JOIN LATERAL (SELECT {{endpoint_key(gone.endpoint_id)}} AS key) k
         CROSS JOIN LATERAL (
                SELECT {{oldest_gated_at(k.key, gone.endpoint_id, gone.queue)}} AS look_after) o
         WHERE o.look_after IS NOT NULL;
    END IF;
    RETURN NULL;
END
$$;

-- name: log_truncate
-- A host table (or the ledger) was truncated: no row trigger saw what went, so the
-- fleet's next tick is a full pass.
CREATE OR REPLACE FUNCTION stall_nudge.log_truncate() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, @host_schema@, pg_temp
AS $$
BEGIN
    IF to_regclass('stall_nudge.sweeps') IS NOT NULL THEN
        UPDATE stall_nudge.sweeps SET full_pass_at = NULL;
    END IF;
    RETURN NULL;
END
$$;

-- name: triggers
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
