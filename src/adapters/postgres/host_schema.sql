-- The reference host schema (docs/operations.md): switchboard's tables as the sweep
-- reads them. Switchboard owns these; the library ships them for tests, the
-- demo and embedders who want a starting point. Idempotent. Every id is
-- text here; adapters.postgres.host_schema_sql builds it with uuid or bigint ids
-- instead (each "text /* id type */" below).

CREATE TABLE IF NOT EXISTS endpoints (
    id    text /* id type */ PRIMARY KEY,
    state text NOT NULL CHECK (state IN ('active', 'paused', 'disabled'))
);

CREATE TABLE IF NOT EXISTS deliveries (
    id          text /* id type */ PRIMARY KEY,
    endpoint_id text /* id type */ NOT NULL REFERENCES endpoints (id),
    verified    boolean NOT NULL,
    received_at timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS todos (
    id               text /* id type */ PRIMARY KEY,
    endpoint_id      text /* id type */ NOT NULL REFERENCES endpoints (id),
    queue            text NOT NULL,
    delivery_id      text /* id type */ NULL REFERENCES deliveries (id),
    state            text NOT NULL CHECK (state IN ('pending', 'claimed', 'done', 'failed')),
    title            text NULL,
    created_at       timestamptz NOT NULL,
    claimed_at       timestamptz NULL,
    claim_owner      text NULL,
    lease_expires_at timestamptz NULL,
    attempt          int NOT NULL DEFAULT 0,
    ring_attempts    int NOT NULL DEFAULT 0,
    last_ringed_at   timestamptz NULL
);

CREATE TABLE IF NOT EXISTS notify_hooks (
    id                   text /* id type */ PRIMARY KEY,
    endpoint_id          text /* id type */ NOT NULL REFERENCES endpoints (id),
    url                  text NOT NULL,
    secret               text NOT NULL,
    queues               text[] NULL,
    enabled              boolean NOT NULL,
    consecutive_failures int NOT NULL DEFAULT 0,
    disabled_at          timestamptz NULL,
    disabled_reason      text NULL
);
