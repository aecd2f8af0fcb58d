"""A team's own function on the sluice library alone (examples/own-function, docs/library.md): its own
template, deployed into embedded AWS with no resource of sluice's stack, processes a reading once even
when it is sent twice (also through a claim check), dead-letters one that keeps failing transiently after
MaxReceiveCount receives, and isolates a body that is not a reading to its poison queue with the reason.

The stack runs in this process (as tests/e2e/test_two_stacks.py's), with short timings: a 10 s function,
three receives, backoffs of 1-2 s. Every wait is a deadline on a condition, polled.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from sluice.claimcheck import send
from sluice.envelope import Envelope
from sluice_local.app.observer import envelope_of, every_message
from sluice_local.emulation.cloud import ROOT, LocalCloud
from tests.waiting import wait_for

EXAMPLE = ROOT / "examples" / "own-function"
SHORT_TIMINGS = {
    "FunctionTimeoutSeconds": "10",
    "QueueVisibilityTimeoutSeconds": "60",  # 6 x 10 s + no batching window
    "MaxReceiveCount": "3",
    "BackoffBaseSeconds": "1",
    "BackoffCapSeconds": "2",
}
TARIFF_CENTS_PER_KWH = Decimal(30)


@pytest.fixture(scope="module")
def metering() -> Iterator[LocalCloud]:
    """examples/own-function/template.yaml deployed alone (its own stack name, no sluice stack)."""
    name = f"metering-{uuid.uuid4().hex[:6]}"
    template = EXAMPLE / "template.yaml"
    with LocalCloud(EXAMPLE, template=template, parameters=SHORT_TIMINGS, stack_name=name) as cloud:
        yield cloud


@pytest.fixture(autouse=True)
def _embedded_aws(metering: LocalCloud, monkeypatch: pytest.MonkeyPatch) -> None:
    """The functions' clients are made at their cold start, in this process: with the embedded endpoint
    (the suite's own fixture removes it for every test)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", metering.endpoint)


def register(cloud: LocalCloud, meter_id: str) -> None:
    """The team's registration system: a meter with its tariff."""
    cloud.client("dynamodb").put_item(
        TableName=cloud.outputs["MetersTableName"],
        Item={
            "meter_id": {"S": meter_id},
            "sk": {"S": "meter"},
            "tariff_cents_per_kwh": {"N": str(TARIFF_CENTS_PER_KWH)},
        },
    )


def reading(meter_id: str, intervals: list[str]) -> dict[str, Any]:
    return {
        "reading_id": f"r-{uuid.uuid4().hex[:8]}",
        "meter_id": meter_id,
        "read_at": "2026-11-27T00:00:00Z",
        "intervals": intervals,
    }


def charges(cloud: LocalCloud, meter_id: str, reading_id: str) -> list[int]:
    """The amounts billed for the reading (one item per charge performed)."""
    items = cloud.client("dynamodb").query(
        TableName=cloud.outputs["MetersTableName"],
        KeyConditionExpression="meter_id = :m AND begins_with(sk, :c)",
        ExpressionAttributeValues={":m": {"S": meter_id}, ":c": {"S": f"charge#{reading_id}#"}},
        ConsistentRead=True,
    )["Items"]
    return [int(item["amount_cents"]["N"]) for item in items]


def drained(cloud: LocalCloud) -> bool:
    """No message on the readings queue, visible or in flight."""
    attributes = cloud.client("sqs").get_queue_attributes(
        QueueUrl=cloud.outputs["ReadingsQueueUrl"],
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return attributes == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}


def ended_on(cloud: LocalCloud, output: str, message_id: str) -> Envelope | None:
    """The envelope of the message sent as ``message_id`` on the queue of ``output``, if it is there."""
    for message in every_message(cloud.client("sqs"), cloud.outputs[output]):
        envelope = envelope_of(message)
        if envelope is not None and envelope.origin_id == message_id:
            return envelope
    return None


def send_reading(cloud: LocalCloud, body: dict[str, Any] | str) -> str:
    text = body if isinstance(body, str) else json.dumps(body)
    return str(
        cloud.client("sqs").send_message(QueueUrl=cloud.outputs["ReadingsQueueUrl"], MessageBody=text)[
            "MessageId"
        ]
    )


def test_a_reading_sent_twice_is_billed_once(metering: LocalCloud) -> None:
    # Given a registered meter
    register(metering, "m-1")
    day = reading("m-1", ["1.250", "2.500", "0.250"])  # 4 kWh at 30 cents
    # When the same reading is sent twice: two messages, one reading id
    first, second = send_reading(metering, day), send_reading(metering, day)
    # Then both messages are handled and the meter is charged once, for the reading's consumption
    wait_for(lambda: charges(metering, "m-1", day["reading_id"]) and drained(metering), "both copies handled")
    assert charges(metering, "m-1", day["reading_id"]) == [120]
    # and neither copy was dead-lettered or isolated
    for output in ("ReadingsDeadLetterQueueUrl", "PoisonQueueUrl"):
        assert ended_on(metering, output, first) is None
        assert ended_on(metering, output, second) is None


def test_a_reading_too_large_for_a_message_is_sent_and_received_through_the_claim_check(
    metering: LocalCloud,
) -> None:
    # Given a registered meter and a day of one-minute intervals, far above a 4 KiB threshold
    register(metering, "m-2")
    day = reading("m-2", ["0.010"] * 1440)  # 14.4 kWh at 30 cents
    bucket = metering.outputs["ClaimCheckBucketName"]
    # When the producer sends it with sluice's claim check, twice
    for _ in range(2):
        send(
            metering.client("sqs"),
            metering.client("s3"),
            queue_url=metering.outputs["ReadingsQueueUrl"],
            body=json.dumps(day),
            bucket=bucket,
            threshold=4096,
        )
    # Then the bodies went to the bucket, and the consumer read one back and billed the reading once
    assert metering.client("s3").list_objects_v2(Bucket=bucket, Prefix="claim-check/")["KeyCount"] >= 2
    wait_for(lambda: charges(metering, "m-2", day["reading_id"]) and drained(metering), "both copies handled")
    assert charges(metering, "m-2", day["reading_id"]) == [432]


def test_a_reading_whose_meter_never_registers_is_dead_lettered_after_max_receive_count(
    metering: LocalCloud,
) -> None:
    # Given a reading for a meter that is not registered (a transient failure: it may still be)
    orphan = reading("m-unregistered", ["1.000"])
    # When it is sent, and keeps failing
    message_id = send_reading(metering, orphan)
    # Then it ends in the dead-letter queue on its third receive (MaxReceiveCount), with the last error
    envelope = wait_for(
        lambda: ended_on(metering, "ReadingsDeadLetterQueueUrl", message_id), "the reading dead-lettered"
    )
    assert envelope.last_error is not None
    assert envelope.last_error.type == "TransientError"
    assert envelope.last_error.message == "meter m-unregistered is not registered (yet)"
    assert envelope.last_error.receives == int(SHORT_TIMINGS["MaxReceiveCount"])
    assert envelope.source == metering.outputs["ReadingsQueueArn"]
    # and it left the readings queue, billed nothing and was not isolated
    wait_for(lambda: drained(metering), "the readings queue drained")
    assert charges(metering, "m-unregistered", orphan["reading_id"]) == []
    assert ended_on(metering, "PoisonQueueUrl", message_id) is None


def test_a_body_that_is_not_a_reading_is_isolated_to_the_poison_queue_with_the_reason(
    metering: LocalCloud,
) -> None:
    # Given a body without the reading's intervals
    broken = {"reading_id": "r-broken", "meter_id": "m-1", "read_at": "2026-11-27T00:00:00Z"}
    # When it is sent
    message_id = send_reading(metering, broken)
    # Then it is isolated at once, on its first receive, with the model's reason
    envelope = wait_for(lambda: ended_on(metering, "PoisonQueueUrl", message_id), "the body isolated")
    assert envelope.last_error is not None
    assert envelope.last_error.type == "PermanentError"
    assert envelope.last_error.message == "body does not match MeterReading: intervals: Field required"
    assert envelope.attempts == 1
    # and it is neither retried nor dead-lettered
    wait_for(lambda: drained(metering), "the readings queue drained")
    assert ended_on(metering, "ReadingsDeadLetterQueueUrl", message_id) is None
