-- sluice job store, version 2: a single-UPDATE run in flight is marked on its pending row (claimed_at,
-- claimed_by, claim_token) so the reaper can count a run that never finished (the runtime died or timed
-- out); one partial index now serves the reaper for both modes.

CREATE INDEX IF NOT EXISTS jobs_claimed_at ON jobs (claimed_at)
    WHERE claimed_at IS NOT NULL AND status IN ('processing', 'pending');
DROP INDEX IF EXISTS jobs_processing_claimed_at;
