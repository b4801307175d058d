-- The indexes the sweep's reads need on the host's tables, in both footprints.
-- migrate builds each one CREATE INDEX CONCURRENTLY (the host's writes go on),
-- outside its transaction, reporting progress, and rebuilds one left invalid. Where
-- the host keeps its own index that fits ("-- fits:": its leading plain columns, with
-- default operator classes and collations, and one of the predicates after "where"),
-- migrate uses that one and builds nothing. docs/host-schema.md lists these shapes.
-- Each entry: "-- index: NAME", an optional "-- fits:" line, a line saying what it is
-- for, then its CREATE INDEX.

-- index: stall_nudge_pending
-- fits: todos (endpoint_id, queue, created_at) where (state = 'pending'::text)
-- Pending todos in pair order, oldest first: the full pass steps from pair to pair on it (a skip scan), and a pair's oldest work is one descent. The index a host that claims "the next todo of a queue" keeps. Ours holds only todos whose names fit an entry (rule short_names), so no host write fails for a name's length.
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_pending
    ON todos (endpoint_id, queue, created_at)
    WHERE todos.state = 'pending' AND {{short_names(todos)}};

-- index: stall_nudge_pending_long
-- Pending todos whose names are too long for a plain entry (rule long_names), keyed by md5 of the pair's names: fixed-size entries that cannot fail. Empty on most hosts.
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_pending_long
    ON todos (md5(endpoint_id::text), md5(queue), created_at)
    WHERE todos.state = 'pending' AND {{long_names(todos)}};

-- index: stall_nudge_claimed
-- fits: todos (endpoint_id, queue, claimed_at) where none | (claimed_at IS NOT NULL)
-- Claimed todos by pair and claim time: progress is "a todo of the pair claimed after its last nudge", one descent per pair with a ledger row. Only todos whose names fit an entry.
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_claimed
    ON todos (endpoint_id, queue, claimed_at)
    WHERE todos.claimed_at IS NOT NULL AND {{short_names(todos)}};

-- index: stall_nudge_claimed_long
-- Claimed todos whose names are too long for a plain entry, keyed by md5 of the pair's names.
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_claimed_long
    ON todos (md5(endpoint_id::text), md5(queue), claimed_at)
    WHERE todos.claimed_at IS NOT NULL AND {{long_names(todos)}};

-- index: stall_nudge_hooks
-- fits: notify_hooks (endpoint_id) where none | enabled
-- An endpoint's enabled hooks: "does a receiver cover the pair" is one descent.
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_hooks
    ON notify_hooks (endpoint_id)
    WHERE notify_hooks.enabled;
