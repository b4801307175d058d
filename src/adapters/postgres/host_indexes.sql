-- The indexes the sweep's reads need on the host's tables: the only objects of ours
-- there. migrate builds each one CREATE INDEX CONCURRENTLY (the host's writes go on),
-- outside any transaction, and rebuilds one left invalid or different. Where the host
-- keeps its own index that fits ("-- fits:": its leading plain columns, with default
-- operator classes and collations, and one of the predicates after "where", as the
-- catalog prints them), migrate uses that one and builds nothing. docs/host-schema.md
-- lists these shapes and what each costs a write. Each entry: "-- index: NAME", an
-- optional "-- fits:" line, a line saying what it is for, then its CREATE INDEX.

-- index: stall_nudge_pending
-- fits: todos (endpoint_id, queue, created_at) where (state = 'pending'::text)
-- Pending todos in pair order, oldest first: the full pass steps from pair to pair on it (a skip scan), and a pair's work is one descent. The index a host that claims "the next todo of a queue" keeps. Ours holds only todos whose names fit an entry (rule short_names), so no host write fails for a name's length.
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_pending
    ON @todos (endpoint_id, queue, created_at)
    WHERE state = 'pending' AND {{short_names(todos)}};

-- index: stall_nudge_pending_long
-- Pending todos whose names are too long for a plain entry, keyed by md5 of the pair's names: fixed-size entries that cannot fail. Empty on most hosts.
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_pending_long
    ON @todos (md5(endpoint_id::text), md5(queue), created_at)
    WHERE state = 'pending' AND NOT {{short_names(todos)}};

-- index: stall_nudge_arrivals
-- fits: todos (created_at) where (state = 'pending'::text)
-- Pending todos by creation: the delta finds the work that crossed the threshold since its watermark with one range scan.
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_arrivals
    ON @todos (created_at)
    WHERE state = 'pending';

-- index: stall_nudge_claim_times
-- fits: todos (claimed_at) where none | (claimed_at IS NOT NULL)
-- Todos by claim time: the delta finds the claims stamped since its watermark with one range scan.
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_claim_times
    ON @todos (claimed_at)
    WHERE claimed_at IS NOT NULL;

-- index: stall_nudge_requeued
-- fits: todos (claimed_at) where ((state = 'pending'::text) AND (claimed_at IS NOT NULL))
-- Pending todos claimed before, that is given back: the delta finds the ones given back since the last full pass with one range scan. Only a requeue writes an entry.
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_requeued
    ON @todos (claimed_at)
    WHERE state = 'pending' AND claimed_at IS NOT NULL;

-- index: stall_nudge_claimed
-- fits: todos (endpoint_id, queue, claimed_at) where none | (claimed_at IS NOT NULL)
-- Claimed todos by pair and claim time: a pair's latest claim is one descent. Only todos whose names fit an entry.
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_claimed
    ON @todos (endpoint_id, queue, claimed_at)
    WHERE claimed_at IS NOT NULL AND {{short_names(todos)}};

-- index: stall_nudge_claimed_long
-- Claimed todos whose names are too long for a plain entry, keyed by md5 of the pair's names.
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_claimed_long
    ON @todos (md5(endpoint_id::text), md5(queue), claimed_at)
    WHERE claimed_at IS NOT NULL AND NOT {{short_names(todos)}};

-- index: stall_nudge_unverified
-- fits: deliveries (id) where (NOT verified)
-- The unverified deliveries alone: the sender gate is two index-only probes, not a visit to every delivery's row. A delivery verified at receipt (most) writes no entry.
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_unverified
    ON @deliveries (id)
    WHERE NOT verified;

-- index: stall_nudge_hooks
-- fits: notify_hooks (endpoint_id) where none | enabled
-- An endpoint's enabled hooks: "does a receiver cover the pair" is one descent.
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_hooks
    ON @notify_hooks (endpoint_id)
    WHERE enabled;
