"""``record.later``: a processor asks for a follow-up on its own queue through the delay pipeline
(docs/delays.md, "From a processor"); ``send_delayed`` refuses a delay outside 0 to 365 days."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from sluice.consumer.record import SluiceRecord
from sluice.delay import send_delayed
from sluice.errors import ConfigurationError
from sluice_local.emulation.sqs_events import drain, receive_event
from tests.doubles import envelope_of

DAY = 24 * 3600


def test_a_processor_asks_for_a_follow_up_on_its_own_queue_once(aws, build_consumer, context):
    # Given a delay queue, and a processor asking for a check three days after each order, once
    delay_url = aws.sqs.create_queue(QueueName="delay")["QueueUrl"]
    asked: list[str] = []

    def process(record: SluiceRecord) -> None:
        follow_up = json.dumps({"order_id": record.data["order_id"], "step": "check"})
        asked.append(record.once("check", record.later, follow_up, delay_seconds=3 * DAY))

    consumer = build_consumer(process, delay_queue_url=delay_url)
    sent = aws.send({"order_id": "o-1"})
    before = datetime.now(UTC)
    # When its record is handled
    assert consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context) == {
        "batchItemFailures": []
    }
    # Then one request is on the delay queue: the body, due in three days, for the queue it came from,
    # a new message (its own identity) on the record's trace
    [request] = drain(aws.sqs, delay_url)
    assert asked == [request["MessageId"]]
    assert json.loads(request["Body"]) == {"order_id": "o-1", "step": "check"}
    envelope = envelope_of(request)
    assert envelope.target == aws.work_url
    assert envelope.deliver_at is not None
    assert before + timedelta(days=3) <= envelope.deliver_at <= datetime.now(UTC) + timedelta(days=3)
    assert envelope.origin_id != sent


def test_a_record_handled_again_after_a_failure_asks_for_its_follow_up_once(aws, build_consumer, context):
    # Given a processor that asks for its follow-up, once, then fails (its downstream timed out)
    delay_url = aws.sqs.create_queue(QueueName="delay")["QueueUrl"]
    asked: list[str] = []

    def process(record: SluiceRecord) -> None:
        follow_up = json.dumps({"order_id": record.data["order_id"], "step": "check"})
        asked.append(record.once("check", record.later, follow_up, delay_seconds=DAY))
        if len(asked) == 1:
            raise TimeoutError("the carrier's API timed out after the check was asked for")

    consumer = build_consumer(process, delay_queue_url=delay_url)
    aws.send({"order_id": "o-3"})
    event = receive_event(aws.sqs, aws.work_url, aws.work_arn, 1)
    # When the record fails, and its delivery is handled again
    assert len(consumer.handle(event, context)["batchItemFailures"]) == 1
    assert consumer.handle(event, context) == {"batchItemFailures": []}
    # Then the follow-up was asked for once: the second attempt got the first one's message id back
    [request] = drain(aws.sqs, delay_url)
    assert asked == [request["MessageId"], request["MessageId"]]


def test_without_a_delay_queue_record_later_is_refused_naming_the_setting(aws, build_consumer, context):
    # Given a consumer without SLUICE_DELAY_QUEUE_URL whose processor asks for a follow-up
    errors: list[Exception] = []

    def process(record: SluiceRecord) -> None:
        try:
            record.later("{}", delay_seconds=60)
        except ConfigurationError as exc:
            errors.append(exc)

    consumer = build_consumer(process)
    aws.send({"order_id": "o-2"})
    consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    # Then it is refused, saying what is missing
    assert [str(e) for e in errors] == ["record.later needs SLUICE_DELAY_QUEUE_URL (the delay queue's URL)"]


@pytest.mark.parametrize(
    ("when", "refused"),
    [
        ({"delay_seconds": -1}, "outside 0 to 365 days"),
        ({"delay_seconds": 365 * DAY + 1}, "outside 0 to 365 days"),
        ({"deliver_at": datetime.now(UTC) + timedelta(days=366)}, "more than 365 days away"),
    ],
)
def test_send_delayed_refuses_a_delay_outside_its_bounds(aws, when, refused):
    delay_url = aws.sqs.create_queue(QueueName="delay")["QueueUrl"]
    with pytest.raises(ValueError, match=refused):
        send_delayed(aws.sqs, delay_queue_url=delay_url, target=aws.work_url, body="{}", **when)
    assert drain(aws.sqs, delay_url) == []


def test_send_delayed_accepts_its_bounds(aws):
    delay_url = aws.sqs.create_queue(QueueName="delay")["QueueUrl"]
    for seconds in (0, 365 * DAY):
        send_delayed(
            aws.sqs, delay_queue_url=delay_url, target=aws.work_url, body="{}", delay_seconds=seconds
        )
    assert len(drain(aws.sqs, delay_url)) == 2
