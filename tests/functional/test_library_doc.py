"""docs/library.md's code runs as written: each ``python excerpt=PATH`` block is the example's code as it
is (examples/own-function, which tests/e2e/test_own_function.py deploys and runs), and each ``python
run=NAME`` block runs here, in the page's order, against in-process AWS (moto) and, for the job store, a
real PostgreSQL; what each did is checked (Given / When / Then). The page has no other code block."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import psycopg
from moto import mock_aws

from sluice.claimcheck import parse_pointer
from sluice.jobs import job_message
from sluice_local.app.observer import envelope_of
from sluice_local.emulation.cloud import ROOT

PAGE = ROOT / "docs" / "library.md"
FENCE = re.compile(r"^```(.*)$", re.MULTILINE)
BLOCK = re.compile(r"^```(?:python|yaml) (excerpt|run)=(\S+)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def blocks(kind: str) -> list[tuple[str, str]]:
    """The page's blocks of ``kind`` (excerpt or run): (path or name, code), in the page's order."""
    found = BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    return [(name, code) for block_kind, name, code in found if block_kind == kind]


def run(name: str, namespace: dict[str, Any]) -> None:
    exec(compile(dict(blocks("run"))[name], f"docs/library.md:{name}", "exec"), namespace)  # noqa: S102 - the page's code


def test_every_code_block_of_the_page_is_an_excerpt_or_a_run_block():
    openers = FENCE.findall(PAGE.read_text(encoding="utf-8"))[::2]  # an opening fence, then its closing one
    assert openers, "the page shows no code"
    assert all(re.fullmatch(r"python (excerpt|run)=\S+|yaml excerpt=\S+", info) for info in openers), openers
    assert [name for name, _ in blocks("run")] == [
        "claim-check-send",
        "short-delay",
        "long-delay",
        "job-producer",
    ]


def test_each_excerpt_is_the_examples_code_as_it_is():
    excerpts = blocks("excerpt")
    assert sorted({path for path, _ in excerpts}) == [
        "examples/own-function/src/app.py",
        "examples/own-function/src/processor.py",
        "examples/own-function/template.yaml",
        "tests/e2e/test_own_function.py",
    ]
    for path, code in excerpts:
        assert code in (ROOT / path).read_text(encoding="utf-8"), f"{path} no longer holds the page's excerpt"


def large_reading() -> dict[str, Any]:
    """A reading above SQS's 256 KiB default threshold (30 000 interval values)."""
    return {
        "reading_id": "r-1",
        "meter_id": "m-1",
        "read_at": "2026-11-27T00:00:00Z",
        "intervals": ["0.010"] * 30_000,
    }


def test_the_producer_blocks_send_through_the_claim_check_sqs_delays_and_the_delay_queue():
    with mock_aws():
        # Given a readings queue, a claim-check bucket, a delay queue and a reading too large for a message
        sqs, s3 = boto3.client("sqs"), boto3.client("s3")
        queue = sqs.create_queue(QueueName="readings")["QueueUrl"]
        delay_queue = sqs.create_queue(QueueName="sluice-delay")["QueueUrl"]
        s3.create_bucket(Bucket="claim-checks")
        reading = large_reading()
        page: dict[str, Any] = {
            "READINGS_QUEUE_URL": queue,
            "CLAIM_CHECK_BUCKET": "claim-checks",
            "DELAY_QUEUE_URL": delay_queue,
            "reading": reading,
        }

        # When the claim-check block runs
        run("claim-check-send", page)
        # Then the queue holds a pointer and the bucket the body, under claim-check/
        [message] = sqs.receive_message(QueueUrl=queue, MessageAttributeNames=["All"])["Messages"]
        pointer = parse_pointer(message["Body"])
        assert pointer is not None
        assert pointer.bucket == "claim-checks"
        assert pointer.key.startswith("claim-check/")
        stored = s3.get_object(Bucket=pointer.bucket, Key=pointer.key)["Body"].read()
        assert json.loads(stored) == reading

        # When the short-delay block runs
        run("short-delay", page)
        # Then SQS holds the message back (DelaySeconds)
        held = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["ApproximateNumberOfMessagesDelayed"])
        assert held["Attributes"]["ApproximateNumberOfMessagesDelayed"] == "1"

        # When the long-delay block runs
        run("long-delay", page)
        # Then the delay queue holds the request: the body, and the target and due time in its envelope
        [request] = sqs.receive_message(QueueUrl=delay_queue, MessageAttributeNames=["All"])["Messages"]
        assert json.loads(request["Body"]) == reading
        envelope = envelope_of(dict(request))
        assert envelope is not None
        assert envelope.target == queue
        assert envelope.deliver_at is not None
        assert abs(envelope.deliver_at - (datetime.now(UTC) + timedelta(days=30))) < timedelta(minutes=1)


def test_the_job_producer_block_inserts_the_row_and_sends_its_id(pg_url, jobs_schema):
    with mock_aws():
        # Given a job queue and a migrated job store (boto3 as the page's earlier blocks imported it)
        sqs = boto3.client("sqs")
        queue = sqs.create_queue(QueueName="jobs")["QueueUrl"]
        page: dict[str, Any] = {
            "boto3": boto3,
            "DATABASE_URL": pg_url,
            "JOBS_SCHEMA": jobs_schema,
            "JOB_QUEUE_URL": queue,
        }
        # When the job producer's block runs
        run("job-producer", page)
        page["store"].close()
        # Then the row is pending, and the message names it
        created = page["created"]
        with psycopg.connect(pg_url) as conn:
            row = conn.execute(
                f"SELECT kind, status, payload FROM {jobs_schema}.jobs WHERE id = %s",  # noqa: S608 - our schema
                (created.id,),
            ).fetchone()
        assert row == ("bill-month", "pending", {"meter_id": "m-1", "month": "2026-11"})
        [message] = sqs.receive_message(QueueUrl=queue)["Messages"]
        assert message["Body"] == job_message(created.id)
