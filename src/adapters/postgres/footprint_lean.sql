-- The lean footprint: nothing of ours on the host's tables but the indexes its reads
-- need (host_indexes.sql); every tick reads the host's rows whole (the full pass).
-- migrate --footprint lean runs this on an incremental database, in migrate's
-- transaction: it removes the triggers and their functions, and folds the claim log
-- into the ledger so no claim is lost. The log tables stay, empty.

-- name: triggers
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

-- name: functions
-- The triggers' functions.
DROP FUNCTION IF EXISTS stall_nudge.log_claim();
DROP FUNCTION IF EXISTS stall_nudge.log_change();
DROP FUNCTION IF EXISTS stall_nudge.log_endpoint_change();
DROP FUNCTION IF EXISTS stall_nudge.log_ledger_delete();
DROP FUNCTION IF EXISTS stall_nudge.log_truncate();

-- name: fold_claims
-- A logged claim of a pair with a ledger row is progress no charge has consumed yet:
-- its next nudge is nudge 1, due at once, exactly as for a pair with no row. Deleting
-- the row keeps that in the ledger itself; the log is then empty.
DELETE FROM queue_stall_nudges n
 WHERE EXISTS (SELECT 1 FROM stall_nudge.claims c WHERE {{pair_is(c, n.endpoint_id, n.queue)}});
DELETE FROM stall_nudge.claims;

-- name: clear_hints
-- What the triggers logged for the usual tick: no lean tick reads it.
DELETE FROM stall_nudge.changes;
DELETE FROM stall_nudge.held;
