"""The Postgres job store through the deployed template: job rows in a real PostgreSQL, job messages on
the job queue, the job consumer's event source mapping, the reaper's and the sweeper's schedules.

Skipped, with the reason printed, when no PostgreSQL answers (``SLUICE_DATABASE_URL``, else
127.0.0.1:5432): the session stack then has no job store (the ``job_stack`` fixture, conftest.py).
"""

from __future__ import annotations

import pytest

from sluice_local.demo.scenarios import jobs, runner


@pytest.mark.parametrize(
    "make",
    [jobs.JobsExactlyOnce, jobs.JobCrashRecovered, jobs.JobRetried, jobs.JobDead, jobs.JobForged],
    ids=["exactly-once", "crash-reaped", "retried", "dead", "forged"],
)
def test_job_scenario(job_stack, make):
    [outcome] = runner.run(job_stack, [make()])
    assert outcome.ok, f"{outcome.name}: expected {outcome.expected}; observed {outcome.observed}"


def test_the_stack_schema_is_migrated_and_its_own(job_stack):
    schema = job_stack.outputs["JobsSchema"]
    assert schema.startswith("sluice_local_")
    store = job_stack.job_store()
    assert store.migrate() == []  # the local runtime and the reaper's first run already applied it
