"""The local runtime stops a recursive loop where AWS Lambda does (sluice_local.emulation.recursion).

A function that sends its record back to its own queue, forever: the poller runs it LIMIT times on the
message's chain, then keeps the next record from it (RecursiveInvocationsDropped), and SQS moves that
record to the dead-letter queue after maxReceiveCount, as AWS documents. With ``RecursiveLoop: Allow``
the loop runs on. No stack is deployed: the runtime's FunctionHost and SqsPoller on moto, in-process.
"""

from __future__ import annotations

import json
import logging
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sluice_local.emulation import recursion
from sluice_local.emulation.functions import FunctionHost, FunctionSpec
from sluice_local.emulation.pollers import MappingSpec, SqsPoller

HANDLER = textwrap.dedent(
    """
    import os

    import boto3

    sqs = boto3.client("sqs", region_name="us-east-1")
    QUEUE_URL = os.environ["QUEUE_URL"]  # read at the cold start, as the environment is there


    def again(event, context):
        for record in event["Records"]:  # a bug: the record goes back where it came from
            sqs.send_message(QueueUrl=QUEUE_URL, MessageBody=record["body"])
    """
)
HEADER = "Root=1-6746a1b2-0123456789abcdef01234567;Parent=89abcdef01234567;Sampled=1"
MAX_RECEIVES = 2


@pytest.fixture
def sqs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    recursion.install()
    with mock_aws():
        yield boto3.client("sqs", region_name="us-east-1")


def loop(sqs: Any, tmp_path: Path, recursive_loop: str) -> tuple[SqsPoller, str, str]:
    """A queue (visibility 0: a stopped record is offered again at once) whose function sends every
    record back to it; returns the poller, the queue's and its dead-letter queue's URLs."""
    dlq = sqs.create_queue(QueueName=f"loop-dlq-{recursive_loop}")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue = sqs.create_queue(
        QueueName=f"loop-{recursive_loop}",
        Attributes={
            "VisibilityTimeout": "0",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": MAX_RECEIVES}),
        },
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    (tmp_path / "app.py").write_text(HANDLER)
    function = FunctionHost(
        FunctionSpec(
            logical_id="LoopFunction",
            name=f"loop-{recursive_loop}",
            arn=f"arn:aws:lambda:us-east-1:123456789012:function:loop-{recursive_loop}",
            code_dir=tmp_path,
            handler="app.again",
            environment={"QUEUE_URL": queue},
            timeout=30.0,
            memory=128,
            recursive_loop=recursive_loop,
        )
    )
    spec = MappingSpec("u-loop", arn, queue, function, 10, window=0, max_concurrency=1, report_failures=True)
    return SqsPoller(sqs, spec), queue, dlq


def drain(poller: SqsPoller, most: int) -> None:
    """Poll until a receive finds the queue empty (at most ``most`` polls)."""
    for _ in range(most):
        poller._poll_once()
        if getattr(poller._idle, "polls", 0):
            return


def test_a_function_sending_its_record_back_forever_is_stopped_at_the_limit(sqs, tmp_path, caplog):
    poller, queue, dlq = loop(sqs, tmp_path, "Terminate")
    sqs.send_message(
        QueueUrl=queue,
        MessageBody="again",
        MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": HEADER}},
    )
    with caplog.at_level(logging.WARNING, logger="sluice_local"):
        drain(poller, 4 * recursion.LIMIT)  # far more polls than the chain may take

    assert poller.spec.function.invocations == recursion.LIMIT
    assert poller.dropped == MAX_RECEIVES  # stopped on every receive until SQS gave up on it
    assert recursion.drops()["loop-Terminate"] >= MAX_RECEIVES
    assert any("RecursiveInvocationsDropped: loop-Terminate" in r.getMessage() for r in caplog.records)
    assert "Messages" not in sqs.receive_message(QueueUrl=queue)
    dead = sqs.receive_message(QueueUrl=dlq, MessageSystemAttributeNames=["All"])["Messages"]
    header = dead[0]["Attributes"]["AWSTraceHeader"]
    assert header.startswith(HEADER)  # the same trace, its lineage counting LIMIT invocations
    assert list(recursion.lineage_of(header).values()) == [recursion.LIMIT]


def test_with_recursive_loop_allow_the_chain_runs_on(sqs, tmp_path):
    poller, queue, _ = loop(sqs, tmp_path, "Allow")
    sqs.send_message(QueueUrl=queue, MessageBody="again")  # no trace: the first invocation starts one
    for _ in range(recursion.LIMIT + 4):
        poller._poll_once()  # the queue always holds the next one

    assert poller.spec.function.invocations == recursion.LIMIT + 4
    assert poller.dropped == 0
    left = sqs.receive_message(QueueUrl=queue, MessageSystemAttributeNames=["All"])["Messages"]
    header = left[0]["Attributes"]["AWSTraceHeader"]
    assert list(recursion.lineage_of(header).values()) == [recursion.LIMIT + 4]
