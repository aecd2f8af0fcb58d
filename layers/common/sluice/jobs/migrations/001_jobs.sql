-- sluice job store, version 1. Applied by sluice.jobs.schema.migrate() inside one transaction whose
-- search_path is the configured schema, so nothing here names a schema.

CREATE TABLE IF NOT EXISTS jobs (
    id              uuid        PRIMARY KEY,
    kind            text        NOT NULL CHECK (length(kind) BETWEEN 1 AND 128),
    payload         jsonb       NOT NULL DEFAULT 'null'::jsonb,
    status          text        NOT NULL DEFAULT 'pending'
                                CHECK (status IN ('pending', 'processing', 'completed', 'error', 'dead')),
    attempt         integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts    integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    errors          jsonb       NOT NULL DEFAULT '[]'::jsonb,  -- [{attempt, at, error, worker}]
    claimed_at      timestamptz,
    claimed_by      text,
    claim_token     uuid,       -- the fencing token of the current (or last) claim
    next_attempt_at timestamptz,
    result          jsonb,
    unique_key      text        UNIQUE,  -- optional: create() is idempotent on it
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz,
    -- a claim always has its token and time; an error row always knows when to retry
    CONSTRAINT jobs_claim_complete CHECK (status <> 'processing' OR (claim_token IS NOT NULL AND claimed_at IS NOT NULL)),
    CONSTRAINT jobs_error_due CHECK (status <> 'error' OR next_attempt_at IS NOT NULL)
);

-- The reaper: processing rows by claim age.
CREATE INDEX IF NOT EXISTS jobs_processing_claimed_at ON jobs (claimed_at) WHERE status = 'processing';
-- The retry sweeper: error rows by due time.
CREATE INDEX IF NOT EXISTS jobs_error_next_attempt_at ON jobs (next_attempt_at) WHERE status = 'error';
-- The orphan sweep: pending rows nobody touched for a while (their message was lost).
CREATE INDEX IF NOT EXISTS jobs_pending_updated_at ON jobs (updated_at) WHERE status = 'pending';
