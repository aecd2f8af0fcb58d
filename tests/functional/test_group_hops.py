"""A fair queue's tenant (MessageGroupId) kept by the consumer's hops and claim-check sends (moto).

The redriver's, the redrive state machine's, the delay pipeline's and the CLI's hops are tested beside
their other behaviour (test_redriver.py, test_redrive_state_machine.py, test_delay_functions.py,
test_delay_scheduler.py, test_cli.py: the tests naming a tenant or a group).
"""

from __future__ import annotations

import json

from sluice import claimcheck
from sluice.limits import MAX_MESSAGE_BYTES
from sluice_local.emulation.sqs_events import drain, receive_event
from tests.doubles import envelope_of


def order(order_id: str, **extra: object) -> dict[str, object]:
    return {"order_id": order_id, "customer_id": "c-1", "amount_cents": 1200, "currency": "EUR", **extra}


def test_given_a_tenant_s_permanent_failure_when_consumed_then_the_poison_queue_gets_its_group_id(
    aws, processor, build_consumer, context
):
    # Given tenant-a's message that fails permanently, beside tenant-b's that succeeds
    consumer = build_consumer(processor)
    aws.send(order("o-bad", behave="permanent"), MessageGroupId="tenant-a")
    aws.send(order("o-good"), MessageGroupId="tenant-b")
    # When consumed
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 2), context)
    # Then the pill is isolated with its tenant's group id, as attribute and in its envelope
    assert response == {"batchItemFailures": []}
    [poisoned] = drain(aws.sqs, aws.poison_url)
    assert json.loads(poisoned["Body"])["order_id"] == "o-bad"
    assert poisoned["Attributes"]["MessageGroupId"] == "tenant-a"
    assert envelope_of(poisoned).group == "tenant-a"
    assert processor.calls["o-good"] == 1


def test_given_a_tenant_s_message_dead_lettered_by_the_consumer_then_the_dlq_gets_its_group_id(
    aws, processor, build_consumer, context
):
    # Given tenant-a's message failing on its last receive (max receive count 1)
    consumer = build_consumer(processor, dead_letter_queue_url=aws.dlq_url, max_receive_count=1)
    aws.send(order("o-flaky", behave="transient"), MessageGroupId="tenant-a")
    # When consumed
    consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    # Then the consumer's own dead-lettering keeps the group id
    [dead] = drain(aws.sqs, aws.dlq_url)
    assert dead["Attributes"]["MessageGroupId"] == "tenant-a"
    assert envelope_of(dead).group == "tenant-a"


def test_given_a_tenant_s_large_body_when_sent_through_the_claim_check_then_it_keeps_its_group(aws):
    # Given a body too large for SQS, of tenant-a
    body = "x" * (MAX_MESSAGE_BYTES + 10)
    # When sent through the claim check
    claimcheck.send(
        aws.sqs, aws.s3, queue_url=aws.work_url, body=body, bucket=aws.bucket, group_id="tenant-a"
    )
    # Then the pointer message carries the group id
    [sent] = drain(aws.sqs, aws.work_url)
    assert sent["Attributes"]["MessageGroupId"] == "tenant-a"
    assert "ExtendedPayloadSize" in sent["MessageAttributes"]


def test_given_a_tenant_s_record_asking_for_a_follow_up_then_the_request_carries_its_group(
    aws, build_consumer, context
):
    # Given a processor asking for a follow-up of each record, and tenant-a's record
    delay_url = aws.sqs.create_queue(QueueName="delay")["QueueUrl"]
    consumer = build_consumer(
        lambda record: record.later(json.dumps({"check": record.data["order_id"]}), delay_seconds=3600),
        delay_queue_url=delay_url,
    )
    aws.send(order("o-1"), MessageGroupId="tenant-a")
    # When handled
    assert consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context) == {
        "batchItemFailures": []
    }
    # Then the delay request keeps the tenant: as its MessageGroupId and in its envelope for the park
    [request] = drain(aws.sqs, delay_url)
    assert request["Attributes"]["MessageGroupId"] == "tenant-a"
    assert envelope_of(request).group == "tenant-a"
