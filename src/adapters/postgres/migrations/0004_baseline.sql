-- Migration 4, the baseline: stall-nudge's own schema (stall_nudge), and the nudge
-- ledger under the spec's name in the host's schema. It absorbs the schema versions 1
-- to 3 of earlier builds (one idempotent script each): on such a database it keeps the
-- ledger and its footprint (those builds kept triggers on the host's tables:
-- incremental); migrate then moves their claims into our log and removes the rest of
-- theirs (earlier_builds.sql). Applied once, in one transaction, by
-- adapters.postgres.migrate, which records it in stall_nudge.migrations. Each step is
-- under a "-- name:" header and a line saying what it is for. Like every migration
-- file it is idempotent: when a table of ours has gone (dropped by hand), migrate
-- applies the recorded migrations again to restore it.

-- name: ledger
-- The nudge ledger: one row per pair nudged since it last had no work.
CREATE TABLE IF NOT EXISTS queue_stall_nudges (
    endpoint_id    text NOT NULL,
    queue          text NOT NULL,
    nudges         int NOT NULL,
    last_nudged_at timestamptz NOT NULL
);

-- name: ledger_constraints
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

-- name: ledger_indexes
-- One ledger row per pair whatever the length of its names; rows by count and stamp,
-- so "whose backoff has ended" is one range scan per count.
CREATE UNIQUE INDEX IF NOT EXISTS stall_nudge_ledger_pair
    ON queue_stall_nudges (md5(endpoint_id), md5(queue));
CREATE INDEX IF NOT EXISTS stall_nudge_ledger_due
    ON queue_stall_nudges (nudges, last_nudged_at);

-- name: settings
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

-- name: objects
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

-- name: sweeps
-- The fleet's record (one row): when it last swept and at what interval, and when its
-- last full pass ran and how long it took (database time).
CREATE TABLE IF NOT EXISTS stall_nudge.sweeps (
    singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    swept_at     timestamptz NOT NULL,
    interval_ms  bigint NULL,
    full_pass_at timestamptz NULL,
    full_pass_ms double precision NULL
);

-- name: claims
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

-- name: changes
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

-- name: held
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
