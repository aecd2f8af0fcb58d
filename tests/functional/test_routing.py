"""Routing is exact, end to end against in-process moto (Given / When / Then): a message dead-lettered
by the consumer goes back to the queue it failed on, and to no other.

A message sent through the long-delay pipeline has the delay queue as its first hop's ``source``; the
consumer then dead-letters it itself (SendMessage: no ``DeadLetterQueueSourceArn``). The real hops run
in turn: ``send_delayed`` → the batch-delay function → the consumer → the redriver.
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

import boto3
import pytest
from aws_lambda_powertools import Logger

from sluice.delay.parker import BatchDelay
from sluice.delay.schedule import send_delayed
from sluice.delay.settings import DelaySettings
from sluice.redrive.breaker import Breaker
from sluice.redrive.runner import Redriver, RedriveReport
from sluice.redrive.settings import RedriveSettings
from sluice_local.emulation.lambda_loader import LambdaContext
from sluice_local.emulation.sqs_events import drain, receive_event
from tests.conftest import TEST_SEAL, Resources, envelope_key_secret
from tests.doubles import RecordingMetrics, envelope_of

from .conftest import ScriptedProcessor

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

REGION = "us-east-1"
ACCOUNT = "123456789012"
BREAKER_TABLE = "breaker"


class Pipeline:
    """The consumer's resources plus a delay queue, the batch-delay function and the redriver."""

    def __init__(self, aws: Resources) -> None:
        self.aws = aws
        self.delay_url = aws.sqs.create_queue(QueueName="delay")["QueueUrl"]
        self.delay_arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:delay"
        self.metrics = RecordingMetrics()
        aws.s3.create_bucket(Bucket="parked")
        aws.dynamodb.create_table(
            TableName=BREAKER_TABLE,
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )

    def logger(self) -> Logger:
        # a logger of its own: Powertools configures a service's logger once per process
        return Logger(
            service=f"sluice-test-{uuid.uuid4().hex}", logger_handler=logging.StreamHandler(io.StringIO())
        )

    def delay(self, body: dict[str, Any]) -> None:
        """A producer's delay request, already due: the batch-delay function sends it straight on."""
        send_delayed(
            self.aws.sqs,
            delay_queue_url=self.delay_url,
            target=self.aws.work_url,
            body=json.dumps(body),
            deliver_at=datetime.now(UTC),
        )
        settings = DelaySettings.from_env(
            {
                "SLUICE_DELAY_BUCKET": "parked",
                "SLUICE_DELAY_STATE_MACHINE_ARN": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:delay",
                "SLUICE_DELAY_TARGETS": self.aws.work_url,
                "SLUICE_POISON_QUEUE_URL": self.aws.poison_url,
                "SLUICE_ENVELOPE_KEY_SECRET": envelope_key_secret(),
            }
        )
        batch_delay = BatchDelay(
            settings=settings,
            sqs=self.aws.sqs,
            s3=self.aws.s3,
            sfn=boto3.client("stepfunctions", region_name=REGION),
            logger=self.logger(),
            metrics_sink=self.metrics,
            seal=TEST_SEAL,
        )
        response = batch_delay.handle(receive_event(self.aws.sqs, self.delay_url, self.delay_arn, 1))
        assert response == {"batchItemFailures": []}

    def redrive(self, **overrides: str) -> RedriveReport:
        env = {
            "SLUICE_DEAD_LETTER_QUEUE_URL": self.aws.dlq_url,
            "SLUICE_POISON_QUEUE_URL": self.aws.poison_url,
            "SLUICE_ENVELOPE_KEY_SECRET": envelope_key_secret(),
            "SLUICE_SOURCE_QUEUE_ARN": self.aws.work_arn,
            "SLUICE_REDRIVE_SOURCES": self.aws.work_arn,
            "SLUICE_DELAY_QUEUE_URL": self.delay_url,
            "SLUICE_REDRIVE_FLOOR_SECONDS": "0",
            "SLUICE_RECEIVE_WAIT_SECONDS": "0",  # moto really waits on an empty long poll
            "SLUICE_BREAKER_TABLE": BREAKER_TABLE,
            **overrides,
        }
        settings = RedriveSettings.from_env(env)
        redriver = Redriver(
            settings=settings,
            sqs=cast("SQSClient", self.aws.sqs),
            breaker=Breaker.from_settings(settings, self.aws.dynamodb),
            logger=self.logger(),
            metrics_sink=self.metrics,
            seal=TEST_SEAL,
            uniform=lambda low, high: low,  # no backoff: the message is visible on its queue at once
            sleep=lambda seconds: None,
        )
        return redriver.run()


@pytest.fixture
def pipeline(aws: Resources) -> Pipeline:
    return Pipeline(aws)


def test_given_a_delayed_message_the_consumer_dead_lettered_when_redriven_then_it_goes_back_to_the_work_queue(
    pipeline, processor: ScriptedProcessor, build_consumer, context: LambdaContext
):
    # Given an order that came through the long-delay pipeline and failed its last receive, so the
    # consumer dead-lettered it itself
    pipeline.delay({"order_id": "o-late", "behave": "transient"})
    consumer = build_consumer(
        processor, resources=pipeline.aws, max_receive_count=1, dead_letter_queue_url=pipeline.aws.dlq_url
    )
    response = consumer.handle(
        receive_event(pipeline.aws.sqs, pipeline.aws.work_url, pipeline.aws.work_arn, 1), context
    )
    assert response == {"batchItemFailures": []}
    [first] = processor.records
    assert first.envelope.source == pipeline.delay_arn  # its first hop's source: the delay queue

    # When the redriver takes it from the DLQ
    report = pipeline.redrive()

    # Then it is re-driven to the work queue it failed on: not refused, not sent to the delay queue
    assert (report.redriven, report.delayed, report.isolated, report.failed) == (1, 0, 0, 0)
    [back] = drain(pipeline.aws.sqs, pipeline.aws.work_url)
    envelope = envelope_of(back)
    assert envelope.source == pipeline.aws.work_arn
    assert envelope.origin_id == first.envelope.origin_id  # the same message: idempotency holds
    assert envelope.attempts == 1
    assert json.loads(back["Body"])["order_id"] == "o-late"
    assert drain(pipeline.aws.sqs, pipeline.delay_url) == []
    assert drain(pipeline.aws.sqs, pipeline.aws.poison_url) == []


def test_given_the_queue_it_failed_on_is_not_allowlisted_when_redriven_then_it_is_refused_not_sent_elsewhere(
    pipeline, processor: ScriptedProcessor, build_consumer, context: LambdaContext
):
    # Given a delayed order the consumer dead-lettered, and a redriver whose allowlist holds only
    # another queue (the delay queue, its first hop, included)
    pipeline.delay({"order_id": "o-elsewhere", "behave": "transient"})
    consumer = build_consumer(
        processor, resources=pipeline.aws, max_receive_count=1, dead_letter_queue_url=pipeline.aws.dlq_url
    )
    consumer.handle(receive_event(pipeline.aws.sqs, pipeline.aws.work_url, pipeline.aws.work_arn, 1), context)
    other = f"arn:aws:sqs:{REGION}:{ACCOUNT}:refunds"

    # When the redriver takes it from the DLQ
    report = pipeline.redrive(
        SLUICE_SOURCE_QUEUE_ARN=other, SLUICE_REDRIVE_SOURCES=f"{other},{pipeline.delay_arn}"
    )

    # Then it is isolated as refused, naming its source; nothing reached any other queue
    assert (report.redriven, report.delayed, report.isolated) == (0, 0, 1)
    [poisoned] = drain(pipeline.aws.sqs, pipeline.aws.poison_url)
    error = envelope_of(poisoned).last_error
    assert error is not None
    assert error.type == "RedriveRefused"
    allowlist = f"{other}, {pipeline.delay_arn}"
    assert (
        error.message
        == f"source queue {pipeline.aws.work_arn!r} is not in the redrive allowlist ({allowlist})"
    )
    assert drain(pipeline.aws.sqs, pipeline.aws.work_url) == []
    assert drain(pipeline.aws.sqs, pipeline.delay_url) == []
