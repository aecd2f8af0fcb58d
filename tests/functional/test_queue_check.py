"""The consumer's source queue, checked at cold start (``sluice.queuecheck``): a queue that would
deliver a record twice, or let a crashing message cycle until its retention deletes it, stops the
consumer from starting, with the queue, the value found and the value needed (Given / When / Then)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from aws_lambda_powertools import Logger
from moto import mock_aws

from sluice.consumer import Consumer
from sluice.errors import ConfigurationError
from sluice.queuecheck import SourceQueueNeeds, check_source_queue, source_queue_problems
from tests.conftest import envelope_key_secret
from tests.doubles import RecordingMetrics

REGION = "us-east-1"
NEEDS = SourceQueueNeeds(visibility_seconds=180, max_receive_count=5)


class Queues:
    def __init__(self) -> None:
        self.sqs: Any = boto3.client("sqs", region_name=REGION)
        self.dlq = self.sqs.create_queue(QueueName="existing-dlq")["QueueUrl"]
        self.dlq_arn = self.arn(self.dlq)

    def arn(self, url: str) -> str:
        return self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]

    def source(self, name: str = "existing", *, visibility: int = 180, max_receive: int | None = 5) -> str:
        """A queue as a team created it outside the stack."""
        attributes: dict[str, Any] = {"VisibilityTimeout": str(visibility)}
        if max_receive is not None:
            policy = {"deadLetterTargetArn": self.dlq_arn, "maxReceiveCount": max_receive}
            attributes["RedrivePolicy"] = json.dumps(policy)
        return str(self.sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"])


@pytest.fixture
def queues() -> Iterator[Queues]:
    with mock_aws():
        yield Queues()


def test_given_a_queue_that_meets_every_need_when_checked_then_nothing_is_found(queues: Queues) -> None:
    url = queues.source()
    assert source_queue_problems(queues.sqs, url, SourceQueueNeeds(180, 5, queues.dlq)) == []
    check_source_queue(queues.sqs, url, NEEDS)  # no error


def test_given_a_visibility_too_short_when_checked_then_the_error_names_queue_found_and_needed(
    queues: Queues,
) -> None:
    # Given an existing queue whose visibility timeout is 60 s, and a consumer that needs 180 s
    url = queues.source(visibility=60)
    # When the consumer checks it at cold start
    with pytest.raises(ConfigurationError) as caught:
        check_source_queue(queues.sqs, url, NEEDS)
    # Then the error names the queue, the value found and the value needed
    message = str(caught.value)
    assert url in message
    assert "VisibilityTimeout is 60 s" in message
    assert "at least 180 s" in message


def test_given_no_redrive_policy_when_checked_then_it_is_refused(queues: Queues) -> None:
    url = queues.source(max_receive=None)
    [problem] = source_queue_problems(queues.sqs, url, NEEDS)
    assert f"source queue {url} has no redrive policy" in problem
    assert "maxReceiveCount 5" in problem


def test_given_another_max_receive_count_when_checked_then_both_counts_are_named(queues: Queues) -> None:
    url = queues.source(max_receive=10)
    [problem] = source_queue_problems(queues.sqs, url, NEEDS)
    assert "maxReceiveCount is 10, the consumer is configured for 5 (SLUICE_MAX_RECEIVE_COUNT)" in problem


def test_given_the_consumer_dead_letters_elsewhere_when_checked_then_both_queues_are_named(
    queues: Queues,
) -> None:
    url = queues.source()
    other = queues.sqs.create_queue(QueueName="other-dlq")["QueueUrl"]
    [problem] = source_queue_problems(queues.sqs, url, SourceQueueNeeds(180, 5, other))
    assert f"dead-letters to {queues.dlq_arn}" in problem
    assert f"the consumer to {other}" in problem


def test_given_a_dead_letter_queue_that_is_gone_when_checked_then_it_is_named(queues: Queues) -> None:
    url = queues.source()
    queues.sqs.delete_queue(QueueUrl=queues.dlq)
    [problem] = source_queue_problems(queues.sqs, url, SourceQueueNeeds(180, 5, queues.dlq))
    assert f"dead-letter queue {queues.dlq} cannot be read" in problem


def test_given_a_queue_that_does_not_exist_when_checked_then_it_is_named(queues: Queues) -> None:
    missing = queues.dlq.replace("existing-dlq", "never-created")
    [problem] = source_queue_problems(queues.sqs, missing, NEEDS)
    assert f"source queue {missing} cannot be read" in problem


def test_given_every_problem_at_once_when_checked_then_each_is_listed(queues: Queues) -> None:
    url = queues.source(visibility=30, max_receive=2)
    problems = source_queue_problems(queues.sqs, url, NEEDS)
    assert len(problems) == 2
    with pytest.raises(ConfigurationError, match=r"VisibilityTimeout is 30 s.*maxReceiveCount is 2"):
        check_source_queue(queues.sqs, url, NEEDS)


def consumer_env(queues: Queues, source: str, **extra: str) -> dict[str, Any]:
    poison = queues.sqs.create_queue(QueueName="poison")["QueueUrl"]
    return {
        "SLUICE_IDEMPOTENCY_TABLE": "idempotency",
        "SLUICE_POISON_QUEUE_URL": poison,
        "SLUICE_ENVELOPE_KEY_SECRET": envelope_key_secret(),
        "SLUICE_SOURCE_QUEUE_URL": source,
        "SLUICE_DEAD_LETTER_QUEUE_URL": queues.dlq,
        "SLUICE_VISIBILITY_TIMEOUT_SECONDS": "180",
        "SLUICE_MAX_RECEIVE_COUNT": "5",
        **extra,
    }


def start(env: dict[str, Any], reads: list[str] | None = None) -> Consumer:
    """A consumer's cold start with ``env`` as its environment; ``reads`` collects the queue URLs it
    asks SQS the attributes of."""
    session = boto3.Session(region_name=REGION)
    if reads is not None:
        session.events.register(
            "provide-client-params.sqs.GetQueueAttributes",
            lambda params, **_: reads.append(params["QueueUrl"]),
        )
    logger = Logger(service="sluice-test")
    return Consumer.from_env(
        lambda record: None, logger=logger, metrics_sink=RecordingMetrics(), environ=env, session=session
    )


def test_given_an_existing_queue_too_short_when_the_consumer_cold_starts_then_it_refuses_to_start(
    queues: Queues,
) -> None:
    # Given a consumer configured for an existing queue whose visibility is too short
    url = queues.source(visibility=45)
    # When it cold starts, Then it refuses, naming the queue
    with pytest.raises(ConfigurationError, match=f"source queue {url}: VisibilityTimeout is 45 s"):
        start(consumer_env(queues, url))
    # ... while the same consumer on a queue that meets its needs starts, having read it and its DLQ
    good = queues.source("existing-ok")
    reads: list[str] = []
    assert isinstance(start(consumer_env(queues, good), reads), Consumer)
    assert reads == [good, queues.dlq]


def test_given_no_source_queue_url_when_the_consumer_cold_starts_then_nothing_is_checked(
    queues: Queues,
) -> None:
    reads: list[str] = []
    assert isinstance(start(consumer_env(queues, ""), reads), Consumer)
    assert reads == []


def test_given_an_existing_queue_named_by_its_arn_when_checked_then_it_is_read_and_named(
    queues: Queues,
) -> None:
    # Given a workload's existing queue, which the template names by ARN, with a visibility too short
    url = queues.source("by-arn", visibility=30)
    # When the consumer checks it at cold start by that ARN
    with pytest.raises(ConfigurationError) as caught:
        check_source_queue(queues.sqs, queues.arn(url), NEEDS)
    # Then its attributes were read (through the client's endpoint) and the error names it
    message = str(caught.value)
    assert "by-arn" in message
    assert "VisibilityTimeout is 30 s" in message
