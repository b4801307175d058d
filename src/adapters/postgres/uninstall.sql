-- migrate --uninstall: every object stall-nudge made, and nothing of the host's. The
-- host's rows stay as they were. Its indexes on the host's tables (ours by name;
-- a host's own index that migrate used is never ours) are dropped concurrently after.

-- name: triggers
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

-- name: earlier_functions
-- An earlier build's trigger functions and tables, in the host's schema.
DROP FUNCTION IF EXISTS stall_nudge_log_claim();
DROP FUNCTION IF EXISTS stall_nudge_log_change();
DROP FUNCTION IF EXISTS stall_nudge_log_endpoint_change();
DROP FUNCTION IF EXISTS stall_nudge_log_ledger_delete();
DROP TABLE IF EXISTS stall_nudge_claims, stall_nudge_changes, stall_nudge_held,
                     stall_nudge_sweeps, stall_nudge_schema;

-- name: ledger
-- The nudge ledger (its triggers and indexes go with it).
DROP TABLE IF EXISTS queue_stall_nudges;

-- name: schema
-- Our schema: its tables, functions, and the record of what migrate did.
DROP SCHEMA IF EXISTS stall_nudge CASCADE;
