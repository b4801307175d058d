-- Migration 1, the baseline: stall-nudge's own schema, stall_nudge, and every table of ours
-- in it. Nothing of ours sits in the host's schema but the indexes our reads need on its
-- tables, and migrate's views of those tables live here too (adapters.postgres._manifest
-- defines both: they name the host's schema). Applied once, in one transaction, by
-- adapters.postgres.migrate, which records it in stall_nudge.migrations. Each step is under
-- a "-- name:" header and a line saying what it is for; each is idempotent, so when a table
-- of ours has gone (dropped by hand) migrate applies the migrations again to restore it.
-- Steps named "table_*" and "index_*" create one object each: migrate --check builds them
-- again in its temporary schema to compare.

-- name: schema
-- Our schema: every object of ours but the indexes on the host's tables.
CREATE SCHEMA IF NOT EXISTS stall_nudge;

-- name: table_migrations
-- The migrations this database has applied.
CREATE TABLE IF NOT EXISTS stall_nudge.migrations (
    version    int PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL
);

-- name: table_queue_stall_nudges
-- The nudge ledger: one row per pair nudged since it last had no work. nudges >= 0 (a
-- refunded first nudge, or progress kept, leaves 0); named_todo is the todo the last nudge
-- named, progressed_at when progress was kept for a nudge still to come. A pair has a row
-- only when its names fit an index entry (stall_core.names_fit), so the key always fits.
CREATE TABLE IF NOT EXISTS stall_nudge.queue_stall_nudges (
    endpoint_id    text NOT NULL,
    queue          text NOT NULL,
    nudges         int NOT NULL CONSTRAINT nudges_not_negative CHECK (nudges >= 0),
    last_nudged_at timestamptz NOT NULL,
    named_todo     text NULL,
    progressed_at  timestamptz NULL,
    PRIMARY KEY (endpoint_id, queue)
);

-- name: index_ledger_due
-- Rows by count and stamp: "whose backoff ended" and "nudged since" are range scans.
CREATE INDEX IF NOT EXISTS ledger_due
    ON stall_nudge.queue_stall_nudges (nudges, last_nudged_at);

-- name: table_settings
-- What migrate recorded of the host: the schema its tables live in.
CREATE TABLE IF NOT EXISTS stall_nudge.settings (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    host_schema text NOT NULL
);

-- name: table_ticks
-- The fleet's record (one row, database time): when it last swept and at what interval,
-- what its last tick judged and up to when (the next delta's watermark), the claims it read
-- (todo ids and stamps, side by side: a claim not among them is new to the next tick), and
-- when its last full pass ran, how long it took and how many pairs it judged.
CREATE TABLE IF NOT EXISTS stall_nudge.ticks (
    singleton       boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    swept_at        timestamptz NOT NULL,
    interval_ms     bigint NULL,
    judged_to       timestamptz NULL,
    last_kind       text NULL,
    last_judged     int NULL,
    claims_read_ids text[] NULL,
    claims_read_at  timestamptz[] NULL,
    full_pass_at    timestamptz NULL,
    full_pass_ms    double precision NULL,
    full_pass_pairs int NULL
);

-- name: table_held
-- Pairs a tick found due but held back for the tick limit, with their count since
-- progress and oldest work: the next tick judges the best tick_limit of them.
CREATE TABLE IF NOT EXISTS stall_nudge.held (
    endpoint_id text NOT NULL,
    queue       text NOT NULL,
    spent       int NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (endpoint_id, queue)
);

-- name: index_held_rank
-- Held entries in charge order.
CREATE INDEX IF NOT EXISTS held_rank ON stall_nudge.held (spent, created_at);

-- name: table_grants
-- The roles migrate --grant made sweeping roles, and the privileges it gave each (those
-- the role did not already hold, "kind|target|column|privilege"): --check compares each
-- role's privileges with what a sweeping role needs; --uninstall revokes what was given,
-- and nothing the host had granted itself.
CREATE TABLE IF NOT EXISTS stall_nudge.grants (
    role       text PRIMARY KEY,
    given      text[] NOT NULL DEFAULT '{}',
    granted_at timestamptz NOT NULL
);

-- name: table_silences
-- Operators' silences: the pair (queue NULL: every queue of the endpoint) is not charged
-- until ends_at (stall_core.silences_pair); unsilence sets ends_at to its now. One row a
-- pair: silencing again replaces it. The tick prunes rows ended before the history's
-- retention.
CREATE TABLE IF NOT EXISTS stall_nudge.silences (
    endpoint_id text NOT NULL,
    queue       text NULL,
    starts_at   timestamptz NOT NULL,
    ends_at     timestamptz NOT NULL,
    created_by  text NOT NULL,
    reason      text NOT NULL
);

-- name: index_silences_pair
-- One silence a pair or endpoint: silencing again replaces it (ON CONFLICT).
CREATE UNIQUE INDEX IF NOT EXISTS silences_pair
    ON stall_nudge.silences (endpoint_id, queue) NULLS NOT DISTINCT;

-- name: index_silences_end
-- Silences by end: "which ended since the last tick" is one descent.
CREATE INDEX IF NOT EXISTS silences_end ON stall_nudge.silences (ends_at);

-- name: table_history
-- What happened, kept for the retention (7 days by default): one row per charge (event
-- charged; outcome and settled_at once its delivery ended: stall_core.OUTCOMES) and one per
-- operator action (stall_core.ACTIONS, with actor and detail: who and why). Our table only:
-- nothing of it is on the host's.
CREATE TABLE IF NOT EXISTS stall_nudge.history (
    at          timestamptz NOT NULL,
    endpoint_id text NOT NULL,
    queue       text NULL,
    event       text NOT NULL,
    nudge       int NULL,
    todo_id     text NULL,
    outcome     text NULL,
    detail      text NULL,
    actor       text NULL,
    until       timestamptz NULL,
    settled_at  timestamptz NULL
);

-- name: index_history_at
-- History by instant: listing, booking an outcome (at is the charge's stamp) and pruning.
CREATE INDEX IF NOT EXISTS history_at ON stall_nudge.history (at);

-- name: index_history_pair
-- A pair's history by instant: `history ENDPOINT QUEUE`, and status's last outcomes and
-- failures, one descent a pair instead of a read of the whole history.
CREATE INDEX IF NOT EXISTS history_pair ON stall_nudge.history (endpoint_id, queue, at);
