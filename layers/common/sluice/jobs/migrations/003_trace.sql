-- sluice job store, version 3: a job keeps the X-Ray trace header of the delivery that first ran it (or
-- the one its producer gave create()), so the sweeper's later messages for it (a retry, an orphan sent
-- again) carry it as their AWSTraceHeader and every attempt of one job lands on one trace.

ALTER TABLE jobs ADD COLUMN IF NOT EXISTS trace text;
