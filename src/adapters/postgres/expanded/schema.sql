-- statement: 0005_baseline.schema
-- Our schema: every table of ours but the ledger.
CREATE SCHEMA IF NOT EXISTS stall_nudge;

-- statement: 0005_baseline.table_migrations
-- The migrations this database has applied.
CREATE TABLE IF NOT EXISTS stall_nudge.migrations (
    version    int PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL
);

-- statement: 0005_baseline.table_ledger
-- The nudge ledger: one row per pair nudged since it last had no work. nudges >= 0 (a
-- refunded first nudge, or progress kept, leaves 0); named_todo is the todo the last
-- nudge named, progressed_at when progress was kept for a nudge still to come. No
-- primary key on the names: a btree entry stops near 2.7 kB, so the pair is keyed by
-- the md5 of each name (index_ledger_pair).
CREATE TABLE IF NOT EXISTS @queue_stall_nudges (
    endpoint_id    text NOT NULL,
    queue          text NOT NULL,
    nudges         int NOT NULL CONSTRAINT stall_nudge_nudges_not_negative CHECK (nudges >= 0),
    last_nudged_at timestamptz NOT NULL,
    named_todo     text NULL,
    progressed_at  timestamptz NULL
);

-- statement: 0005_baseline.ledger_from_version_4
-- A ledger an earlier build made lacks the new columns (nullable: a row it charged reads
-- progress by timestamps alone).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = '@queue_stall_nudges'::regclass AND attname = 'named_todo') THEN
        ALTER TABLE @queue_stall_nudges ADD COLUMN named_todo text NULL,
                                        ADD COLUMN progressed_at timestamptz NULL;
    END IF;
END
$$;

-- statement: 0005_baseline.index_ledger_pair
-- One ledger row per pair, whatever the length of its names.
CREATE UNIQUE INDEX IF NOT EXISTS stall_nudge_ledger_pair
    ON @queue_stall_nudges (md5(endpoint_id), md5(queue));

-- statement: 0005_baseline.index_ledger_due
-- Rows by count and stamp: "whose backoff ended" and "nudged since" are range scans.
CREATE INDEX IF NOT EXISTS stall_nudge_ledger_due
    ON @queue_stall_nudges (nudges, last_nudged_at);

-- statement: 0005_baseline.fold_claim_logs
-- An earlier build's claim log (stall_nudge.claims; before it, stall_nudge_claims in the
-- host's schema) holds claims no charge consumed: progress. Each pair with a logged claim
-- keeps it (count 0, progressed_at), and its stamp moves up to the latest logged claim,
-- which is thereby consumed: it is not "after the last nudge" again. Then the log goes.
DO $$
DECLARE
    ledger regclass := '@queue_stall_nudges'::regclass;
    log regclass;
BEGIN
    FOR log IN
        SELECT c.oid FROM pg_class c
         WHERE c.oid = to_regclass('stall_nudge.claims')
            OR (c.relname = 'stall_nudge_claims' AND c.relkind = 'r'
                AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = ledger))
    LOOP
        EXECUTE format(
            'UPDATE %s n SET nudges = 0, progressed_at = now(),
                    last_nudged_at = GREATEST(n.last_nudged_at, c.latest)
               FROM (SELECT endpoint_id, queue, max(claimed_at) AS latest FROM %s
                      GROUP BY endpoint_id, queue) c
              WHERE n.endpoint_id = c.endpoint_id AND n.queue = c.queue', ledger, log);
        EXECUTE format('DROP TABLE %s', log);
    END LOOP;
END
$$;

-- statement: 0005_baseline.settings_from_version_4
-- An earlier build's settings (its footprint) are replaced.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute
                WHERE attrelid = to_regclass('stall_nudge.settings') AND attname = 'footprint') THEN
        DROP TABLE stall_nudge.settings;
    END IF;
END
$$;

-- statement: 0005_baseline.table_settings
-- What migrate recorded of the host: the schema its tables live in (every statement
-- names them with it).
CREATE TABLE IF NOT EXISTS stall_nudge.settings (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    host_schema text NOT NULL
);

-- statement: 0005_baseline.sweeps_from_version_4
-- An earlier build's record lacks what the delta reads: it goes (the next tick is a full
-- pass) and the step after makes it anew.
DO $$
BEGIN
    IF to_regclass('stall_nudge.sweeps') IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pg_attribute
                        WHERE attrelid = to_regclass('stall_nudge.sweeps')
                          AND attname = 'judged_to') THEN
        DROP TABLE stall_nudge.sweeps;
    END IF;
END
$$;

-- statement: 0005_baseline.table_sweeps
-- The fleet's record (one row, database time): when it last swept and at what interval,
-- what its last tick judged and up to when (the next delta's watermark), and when its
-- last full pass ran, how long it took and how many pairs it judged.
CREATE TABLE IF NOT EXISTS stall_nudge.sweeps (
    singleton       boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    swept_at        timestamptz NOT NULL,
    interval_ms     bigint NULL,
    judged_to       timestamptz NULL,
    last_kind       text NULL,
    last_judged     int NULL,
    full_pass_at    timestamptz NULL,
    full_pass_ms    double precision NULL,
    full_pass_pairs int NULL
);

-- statement: 0005_baseline.held_from_version_4
-- An earlier build's held pairs (keyed by todo) are replaced: they are hints only.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute
                WHERE attrelid = to_regclass('stall_nudge.held') AND attname = 'todo_id') THEN
        DROP TABLE stall_nudge.held;
    END IF;
END
$$;

-- statement: 0005_baseline.table_held
-- Pairs a tick found due but held back for the tick limit, with their count since
-- progress and oldest work: the next tick judges the best tick_limit of them.
CREATE TABLE IF NOT EXISTS stall_nudge.held (
    endpoint_id text NOT NULL,
    queue       text NOT NULL,
    spent       int NOT NULL,
    created_at  timestamptz NOT NULL
);

-- statement: 0005_baseline.index_held_pair
-- One held entry per pair.
CREATE UNIQUE INDEX IF NOT EXISTS held_pair ON stall_nudge.held (md5(endpoint_id), md5(queue));

-- statement: 0005_baseline.index_held_rank
-- Held entries in charge order.
CREATE INDEX IF NOT EXISTS held_rank ON stall_nudge.held (spent, created_at);

-- statement: 0005_baseline.table_grants
-- The roles migrate --grant made sweeping roles, and the privileges it gave each (those
-- the role did not already hold, "kind|target|column|privilege"): --check compares each
-- role's privileges with what a sweeping role needs; --uninstall revokes what was given,
-- and nothing the host had granted itself.
CREATE TABLE IF NOT EXISTS stall_nudge.grants (
    role       text PRIMARY KEY,
    given      text[] NOT NULL DEFAULT '{}',
    granted_at timestamptz NOT NULL
);

-- statement: host_indexes.stall_nudge_pending
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_pending
    ON @todos (endpoint_id, queue, created_at)
    WHERE state = 'pending' AND (octet_length(todos.endpoint_id::text) + octet_length(todos.queue) <= 2000)

-- statement: host_indexes.stall_nudge_pending_long
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_pending_long
    ON @todos (md5(endpoint_id::text), md5(queue), created_at)
    WHERE state = 'pending' AND NOT (octet_length(todos.endpoint_id::text) + octet_length(todos.queue) <= 2000)

-- statement: host_indexes.stall_nudge_arrivals
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_arrivals
    ON @todos (created_at)
    WHERE state = 'pending'

-- statement: host_indexes.stall_nudge_claim_times
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_claim_times
    ON @todos (claimed_at)
    WHERE claimed_at IS NOT NULL

-- statement: host_indexes.stall_nudge_requeued
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_requeued
    ON @todos (claimed_at)
    WHERE state = 'pending' AND claimed_at IS NOT NULL

-- statement: host_indexes.stall_nudge_claimed
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_claimed
    ON @todos (endpoint_id, queue, claimed_at)
    WHERE claimed_at IS NOT NULL AND (octet_length(todos.endpoint_id::text) + octet_length(todos.queue) <= 2000)

-- statement: host_indexes.stall_nudge_claimed_long
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_claimed_long
    ON @todos (md5(endpoint_id::text), md5(queue), claimed_at)
    WHERE claimed_at IS NOT NULL AND NOT (octet_length(todos.endpoint_id::text) + octet_length(todos.queue) <= 2000)

-- statement: host_indexes.stall_nudge_unverified
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_unverified
    ON @deliveries (id)
    WHERE NOT verified

-- statement: host_indexes.stall_nudge_hooks
CREATE INDEX CONCURRENTLY IF NOT EXISTS stall_nudge_hooks
    ON @notify_hooks (endpoint_id)
    WHERE enabled

