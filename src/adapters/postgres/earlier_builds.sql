-- What migrate does with an earlier build's objects (schema versions 1 to 3, or an
-- older build's migrate run during a deploy): their names are never this build's
-- (triggers stall_nudge_log_*, tables and functions stall_nudge_* in the host's
-- schema, and the indexes in _migrate.RETIRED_INDEXES). migrate drops each one it
-- finds, triggers first, so no host write meets a half-removed trigger; it runs this
-- first, in its transaction, when the earlier claim log is there.

-- name: fold_claims
-- Claims an earlier build logged that no charge consumed yet move into our log, so no
-- claim made before the upgrade is lost.
INSERT INTO stall_nudge.claims (endpoint_id, queue, claimed_at)
SELECT endpoint_id, queue, claimed_at FROM stall_nudge_claims;
