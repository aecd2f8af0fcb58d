"""The consumer's FIFO mode against in-process moto: a FIFO work queue (its name ends in .fifo), Lambda's
rule for a FIFO partial batch, backoff by visibility and never by DelaySeconds (Given / When / Then)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sluice.errors import ConfigurationError
from sluice_local.emulation.sqs_events import receive_event
from sluice_local.testing.direct import queue_arn_of
from tests.doubles import envelope_of

FIFO = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}


@pytest.fixture
def fifo(aws):
    """The test's resources with a FIFO work queue and a FIFO dead-letter queue."""
    dlq_url = aws.sqs.create_queue(QueueName="work-dlq.fifo", Attributes=FIFO)["QueueUrl"]
    redrive = {"deadLetterTargetArn": queue_arn_of(aws.sqs, dlq_url), "maxReceiveCount": 5}
    attributes = {**FIFO, "VisibilityTimeout": "180", "RedrivePolicy": json.dumps(redrive)}
    url = aws.sqs.create_queue(QueueName="work.fifo", Attributes=attributes)["QueueUrl"]
    return dataclasses.replace(aws, work_url=url, work_arn=queue_arn_of(aws.sqs, url), dlq_url=dlq_url)


def send_in_groups(resources, *orders: tuple[str, str, str]) -> dict[str, str]:
    """Send (group, order id, behave) in order; the message id of each order id."""
    ids = {}
    for group, order_id, behave in orders:
        body = json.dumps({"order_id": order_id, "behave": behave})
        ids[order_id] = resources.send(body, MessageGroupId=group)
    return ids


def failed(response: dict) -> list[str]:
    return [f["itemIdentifier"] for f in response["batchItemFailures"]]


def visibility_changes(api_calls) -> dict[str, int]:
    return {p["ReceiptHandle"]: p["VisibilityTimeout"] for p in api_calls.params("ChangeMessageVisibility")}


def test_given_a_failure_then_it_and_every_later_record_are_failed_unrun_and_handed_back(
    fifo, processor, build_consumer, context, api_calls, metrics
):
    # Given a batch of two groups whose second record fails transiently
    consumer = build_consumer(processor, source_queue_url=fifo.work_arn)
    ids = send_in_groups(
        fifo, ("a", "o-1", "ok"), ("a", "o-2", "transient"), ("b", "o-3", "ok"), ("a", "o-4", "ok")
    )
    event = receive_event(fifo.sqs, fifo.work_url, fifo.work_arn, 4)
    handles = {r["messageId"]: r["receiptHandle"] for r in event["Records"]}
    # When the consumer handles it
    response = consumer.handle(event, context)
    # Then nothing after the failure ran, and the failure and every later record are reported
    assert [r.data["order_id"] for r in processor.records] == ["o-1", "o-2"]
    assert failed(response) == [ids["o-2"], ids["o-3"], ids["o-4"]]
    # the failed record waits out its backoff as its visibility; the unrun ones are handed back at once
    changes = visibility_changes(api_calls)
    assert changes[handles[ids["o-2"]]] >= 1
    assert changes[handles[ids["o-3"]]] == changes[handles[ids["o-4"]]] == 0
    assert metrics.values["RecordsHeldBack"] == 2
    assert metrics.values["RecordsFailed"] == 1
    # and nothing was sent with DelaySeconds (SQS refuses it per message on a FIFO queue)
    assert not [p for p in api_calls.params("SendMessage") if "DelaySeconds" in p]


def test_given_skip_group_on_error_then_other_groups_go_on_and_the_next_batch_of_the_failed_group_runs(
    fifo, processor, build_consumer, context
):
    # Given skip-group mode and group a's first record failing once (its side effect done, then an error)
    consumer = build_consumer(
        processor,
        source_queue_url=fifo.work_arn,
        fifo_skip_group_on_error="true",
        backoff_floor_seconds=0,
        backoff_base_seconds=1,
    )
    ids = send_in_groups(fifo, ("a", "o-1", "charge_then_fail"), ("a", "o-2", "ok"), ("b", "o-3", "ok"))
    first = consumer.handle(receive_event(fifo.sqs, fifo.work_url, fifo.work_arn, 3), context)
    # Then only group a's records are reported; group b's was processed
    assert failed(first) == [ids["o-1"], ids["o-2"]]
    assert [r.data["order_id"] for r in processor.records] == ["o-1", "o-3"]
    # When the same (warm) consumer gets group a's records again, after the failed one's backoff
    # (receive_event polls until both are back, ≤ 1 s of backoff, with a deadline)
    again = receive_event(fifo.sqs, fifo.work_url, fifo.work_arn, 2, timeout=10)
    second = consumer.handle(again, context)
    # Then they are processed, in group order: no failed-group state survived the first invocation
    assert failed(second) == []
    assert [r.data["order_id"] for r in processor.records if r.data["order_id"] != "o-3"] == [
        "o-1",
        "o-1",
        "o-2",
    ]
    assert processor.effects["charge:o-1"] == 1


def test_given_a_permanent_failure_then_it_is_isolated_and_its_group_goes_on(
    fifo, processor, build_consumer, context
):
    # Given a FIFO batch whose first record fails permanently
    consumer = build_consumer(processor, source_queue_url=fifo.work_arn)
    ids = send_in_groups(fifo, ("a", "o-1", "permanent"), ("a", "o-2", "ok"))
    response = consumer.handle(receive_event(fifo.sqs, fifo.work_url, fifo.work_arn, 2), context)
    # Then it went to the (standard) poison queue, counted done, and the next record of its group ran
    assert failed(response) == []
    assert [r.data["order_id"] for r in processor.records] == ["o-1", "o-2"]
    poisoned = fifo.sqs.receive_message(QueueUrl=fifo.poison_url, MessageAttributeNames=["All"])["Messages"]
    assert [json.loads(m["Body"])["order_id"] for m in poisoned] == ["o-1"]
    assert ids["o-1"] in json.dumps(poisoned[0]["MessageAttributes"])  # its origin, for a replay


def test_given_a_fifo_source_queue_with_in_batch_concurrency_then_the_cold_start_fails_naming_it(
    fifo, build_consumer
):
    with pytest.raises(ConfigurationError, match=r"SLUICE_CONCURRENCY.*FIFO"):
        build_consumer(lambda r: None, source_queue_url=fifo.work_arn, concurrency=4)


def test_given_a_processor_asking_for_a_delay_on_a_fifo_queue_then_it_is_refused_and_nothing_is_sent(
    fifo, build_consumer, context, api_calls
):
    # Given a FIFO workload's processor that asks for a follow-up later (the delay pipeline would
    # deliver it with DelaySeconds and without its group: SQS refuses both on a FIFO queue)
    delay_url = fifo.sqs.create_queue(QueueName="delay")["QueueUrl"]
    errors: list[Exception] = []

    def asks_later(record) -> None:
        try:
            record.later("follow-up", delay_seconds=60)
        except ConfigurationError as exc:
            errors.append(exc)
            raise

    consumer = build_consumer(asks_later, source_queue_url=fifo.work_arn, delay_queue_url=delay_url)
    ids = send_in_groups(fifo, ("a", "o-1", "ok"))
    response = consumer.handle(receive_event(fifo.sqs, fifo.work_url, fifo.work_arn, 1), context)
    # Then the record fails with the reason (retried, dead-lettered with it), and nothing was sent
    assert failed(response) == [ids["o-1"]]
    assert "FIFO" in str(errors[0])
    assert api_calls.count("SendMessage") == 0


def test_given_the_last_receive_on_a_fifo_queue_then_the_consumer_dead_letters_it_with_its_group_and_error(
    fifo, processor, build_consumer, context
):
    # Given a FIFO workload's record failing on its last receive
    consumer = build_consumer(processor, max_receive_count=1, dead_letter_queue_url=fifo.dlq_url)
    ids = send_in_groups(fifo, ("tenant-7", "o-dl", "transient"))
    response = consumer.handle(receive_event(fifo.sqs, fifo.work_url, fifo.work_arn, 1), context)
    # Then the consumer sent it to the FIFO DLQ itself, in its group, with its error in its envelope
    assert failed(response) == []
    dead = fifo.sqs.receive_message(
        QueueUrl=fifo.dlq_url, MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"]
    )["Messages"]
    assert [m["Attributes"]["MessageGroupId"] for m in dead] == ["tenant-7"]
    envelope = envelope_of(dead[0])
    assert envelope.origin_id == ids["o-dl"]
    assert envelope.last_error is not None
    assert envelope.last_error.type == "TransientError"
