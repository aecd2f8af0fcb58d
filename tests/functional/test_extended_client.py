"""Interop with the AWS Extended Client for Python (``amazon-sqs-extended-client``), set up as its README
shows: the real package as producer against sluice's consumer, and as receiver of sluice's producer.

The Java client writes the same two formats (``PayloadS3Pointer`` + ``ExtendedPayloadSize``; legacy
``MessageS3Pointer`` + ``SQSLargePayloadSize``) under the same bare random key at the bucket root, so the
legacy/current cases here stand for it too.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sluice import claimcheck
from sluice_local.emulation.sqs_events import drain, receive_event
from tests.doubles import extended_client_session, last_error_of

REGION = "us-east-1"


@pytest.fixture(scope="module")
def extended_session() -> Any:
    return extended_client_session()


def extended_client(session_class: Any, bucket: str, *, legacy: bool = False) -> Any:
    """An SQS client configured as the package's README shows."""
    sqs = session_class(region_name=REGION).client("sqs")
    sqs.large_payload_support = bucket
    sqs.use_legacy_attribute = legacy
    return sqs


def order(order_id: str, size: int) -> str:
    return json.dumps(
        {
            "order_id": order_id,
            "customer_id": "c-1",
            "amount_cents": 1200,
            "currency": "EUR",
            "note": "x" * size,
        }
    )


@pytest.mark.parametrize("legacy", [False, True], ids=["current", "legacy"])
@pytest.mark.parametrize(
    "s3_key", [None, "tenant-a/2026/11/order.json"], ids=["random-key", "S3Key-attribute"]
)
def test_given_the_python_extended_client_as_producer_when_consumed_by_default_then_the_payload_is_read(
    aws, processor, build_consumer, metrics, context, extended_session, legacy, s3_key
):
    # Given a large message sent through the real Extended Client (payload at the bucket root, or under
    # the key its per-message S3Key attribute names)
    producer = extended_client(extended_session, aws.bucket, legacy=legacy)
    body = order("o-ext", 300_000)
    attributes = {"S3Key": {"DataType": "String", "StringValue": s3_key}} if s3_key else {}
    producer.send_message(QueueUrl=aws.work_url, MessageBody=body, MessageAttributes=attributes)
    raw = aws.sqs.receive_message(QueueUrl=aws.work_url, MessageAttributeNames=["All"], VisibilityTimeout=0)
    [on_the_wire] = raw["Messages"]
    pointer = claimcheck.parse_pointer(on_the_wire["Body"])
    assert pointer is not None
    assert pointer.format == ("legacy" if legacy else "extended")
    assert pointer.key == (s3_key or pointer.key)
    assert "/" not in pointer.key or s3_key  # a bare random key unless the producer named one

    # When sluice's consumer, with the template's default ClaimCheckPrefix (''), handles it
    consumer = build_consumer(processor, claim_check_prefix="")
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)

    # Then the processor gets the original payload
    assert response == {"batchItemFailures": []}
    [record] = processor.records
    assert record.data["note"] == "x" * 300_000
    size_attribute = "SQSLargePayloadSize" if legacy else "ExtendedPayloadSize"
    assert record.attributes[size_attribute]["StringValue"] == str(len(body.encode()))
    assert metrics.values["ClaimChecksResolved"] == 1
    assert drain(aws.sqs, aws.poison_url) == []


def test_given_an_opted_in_prefix_when_a_pointer_is_at_the_root_then_it_is_isolated_with_the_reason(
    aws, processor, build_consumer, metrics, context, extended_session
):
    # Given a stack that restricts claim-check keys to a prefix (the opt-in)
    producer = extended_client(extended_session, aws.bucket)
    producer.send_message(QueueUrl=aws.work_url, MessageBody=order("o-root", 300_000))
    consumer = build_consumer(processor, claim_check_prefix="claim-check/")

    # When the consumer handles the root-key pointer
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)

    # Then it is isolated with the reason, unread
    assert response == {"batchItemFailures": []}
    assert processor.records == []
    [poisoned] = drain(aws.sqs, aws.poison_url)
    assert "is outside the prefix 'claim-check/'" in last_error_of(poisoned).message
    assert metrics.values["RecordsIsolated"] == 1


def test_given_the_extended_client_pointing_at_another_bucket_when_consumed_then_that_bucket_is_never_read(
    aws, processor, build_consumer, context, extended_session
):
    # Given a producer whose Extended Client offloads to a bucket the stack does not own
    aws.s3.create_bucket(Bucket="someone-elses-bucket")
    producer = extended_client(extended_session, "someone-elses-bucket")
    producer.send_message(QueueUrl=aws.work_url, MessageBody=order("o-foreign", 300_000))
    consumer = build_consumer(processor, claim_check_prefix="")

    # When consumed, Then it is isolated (only ClaimCheckBucket is ever read)
    consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert processor.records == []
    [poisoned] = drain(aws.sqs, aws.poison_url)
    assert "'someone-elses-bucket' is not in the allowlist" in last_error_of(poisoned).message


@pytest.mark.parametrize("prefix", ["", "claim-check/"])
def test_given_sluices_producer_when_the_python_extended_client_receives_then_it_gets_the_payload(
    aws, extended_session, prefix
):
    # Given a large message sent by sluice's producer helper
    body = order("o-sluice", 300_000)
    claimcheck.send(aws.sqs, aws.s3, queue_url=aws.work_url, body=body, bucket=aws.bucket, prefix=prefix)

    # When the real Extended Client receives it
    receiver = extended_client(extended_session, aws.bucket)
    [message] = receiver.receive_message(QueueUrl=aws.work_url, MessageAttributeNames=["All"])["Messages"]

    # Then it reads the payload from S3, as it would its own
    assert message["Body"] == body
    assert "ExtendedPayloadSize" not in message.get("MessageAttributes", {})
    receiver.delete_message(QueueUrl=aws.work_url, ReceiptHandle=message["ReceiptHandle"])
