"""A job's attempts share one trace: the X-Ray header of the delivery that first ran it (or the one its
producer gave ``create``) is kept on the row, and the messages the reaper and the sweeper send for its
later attempts carry it as their ``AWSTraceHeader`` (Given / When / Then).

Against a real PostgreSQL (skipped, with the reason printed, when none answers) and moto's SQS.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any, Literal

import boto3
import pytest
from aws_lambda_powertools import Logger
from moto import mock_aws

from sluice.errors import TransientError
from sluice.jobs import JobKinds, JobMaintenance, JobStore, JobWorker, Outcome
from tests.doubles import RecordingMetrics
from tests.functional.test_job_store import _make_due, store_for

FIRST = "Root=1-6745f1a2-0123456789abcdef01234567;Parent=53995c3f42cd8ad8;Sampled=1"
LATER = "Root=1-6745f1b3-fedcba9876543210fedcba98;Parent=0011223344556677;Sampled=1"
PRODUCER = "Root=1-6745f0ff-aaaaaaaaaaaaaaaaaaaaaaaa;Sampled=0"


@pytest.fixture
def queue() -> Iterator[tuple[Any, str]]:
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        yield sqs, sqs.create_queue(QueueName=f"jobs-{uuid.uuid4().hex[:8]}")["QueueUrl"]


def maintenance(store: JobStore, queue: tuple[Any, str], *, lease: int = 960) -> JobMaintenance:
    sqs, url = queue
    return JobMaintenance(
        store,
        sqs=sqs,
        queue_url=url,
        logger=Logger(service="sluice-test"),
        metrics_sink=RecordingMetrics(),
        lease_seconds=lease,
        orphan_seconds=3600,
    )


def sent(queue: tuple[Any, str]) -> list[tuple[str, str | None]]:
    """(body, AWSTraceHeader) of every message on the queue."""
    sqs, url = queue
    out = []
    while messages := sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["AWSTraceHeader"]
    ).get("Messages", []):
        for m in messages:
            out.append((m["Body"], m.get("Attributes", {}).get("AWSTraceHeader")))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return out


def flaky_kinds(mode: Literal["two_phase", "single"]) -> JobKinds:
    kinds = JobKinds()

    @kinds.register("flaky", mode=mode)
    def flaky(job: Any) -> None:
        raise TransientError("downstream unavailable")

    return kinds


@pytest.mark.parametrize("mode", ["two_phase", "single"])
def test_given_a_failed_job_when_its_retry_is_swept_then_the_message_carries_the_first_deliverys_trace(
    pg_url, jobs_schema, queue, mode
):
    # Given a job whose first delivery (on trace FIRST) failed transiently
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("flaky").id
    worker = JobWorker(store, flaky_kinds(mode))
    assert worker.run(job_id, trace=FIRST) is Outcome.FAILED
    _make_due(pg_url, jobs_schema, job_id)
    # When the sweeper enqueues its retry
    report = maintenance(store, queue).sweep()
    # Then the message names the job and carries FIRST
    assert report.retried == 1
    assert sent(queue) == [(f'{{"job_id":"{job_id}"}}', FIRST)]
    # ... and a later delivery on another trace does not replace it
    assert worker.run(job_id, trace=LATER) is Outcome.FAILED
    _make_due(pg_url, jobs_schema, job_id)
    maintenance(store, queue).sweep()
    assert [trace for _, trace in sent(queue)] == [FIRST]


def test_given_a_producer_trace_when_the_jobs_message_was_lost_then_the_orphan_is_sent_on_it(
    pg_url, jobs_schema, queue
):
    # Given a job created on the producer's trace whose message never arrived
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("flaky", trace=PRODUCER).id
    # When the orphan sweep finds it
    [lost] = store.orphans(0)
    # Then it comes with the producer's trace, which the message then carries
    assert (lost.id, lost.trace) == (job_id, PRODUCER)
    store.create("flaky", job_id=job_id)  # idempotent: the trace stays
    assert [r.trace for r in store.orphans(0)] == [PRODUCER]


def test_given_an_expired_claim_when_reaped_then_its_retry_message_carries_the_claims_trace(
    pg_url, jobs_schema, queue
):
    # Given a job claimed on trace FIRST by a worker that then died
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("flaky").id
    store.claim(job_id, trace=FIRST)
    # When the reaper takes it back (a lease of 0 s: the claim is already expired)
    report = maintenance(store, queue, lease=0).reap()
    # Then its message carries FIRST
    assert report.reaped == 1
    assert sent(queue) == [(f'{{"job_id":"{job_id}"}}', FIRST)]


def test_given_a_malformed_trace_when_a_job_is_run_then_none_is_kept_and_the_retry_goes_without(
    pg_url, jobs_schema, queue
):
    # Given a first delivery whose trace header is not one SQS accepts
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("flaky", trace="Root=forged\n;x").id
    assert JobWorker(store, flaky_kinds("two_phase")).run(job_id, trace="not a header") is Outcome.FAILED
    _make_due(pg_url, jobs_schema, job_id)
    # When its retry is swept
    maintenance(store, queue).sweep()
    # Then the message goes out without a trace header (SQS would refuse a malformed one)
    assert sent(queue) == [(f'{{"job_id":"{job_id}"}}', None)]
