"""The consumer's log lines that tools select on carry their ``event`` (sluice.logevents), whatever
their message text says: the demo observer and the soak find them by it."""

from __future__ import annotations

import io
import json
import logging
import uuid
from typing import Any

import pytest
from aws_lambda_powertools import Logger

from sluice.consumer import Consumer
from sluice.logevents import EVENT, LogEvent
from sluice_local.emulation.sqs_events import receive_event


def order(order_id: str, **extra: object) -> dict[str, object]:
    return {"order_id": order_id, "customer_id": "c-1", "amount_cents": 1200, "currency": "EUR", **extra}


@pytest.fixture
def log() -> io.StringIO:
    return io.StringIO()


@pytest.fixture
def consume(aws, metrics, session, processor, context, log):
    def run(**settings: object) -> dict[str, Any]:
        logger = Logger(
            service=f"sluice-test-{uuid.uuid4().hex[:8]}", logger_handler=logging.StreamHandler(log)
        )
        consumer = Consumer.from_env(
            processor, logger=logger, metrics_sink=metrics, environ=aws.env(**settings), session=session
        )
        return consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)

    return run


def events(log: io.StringIO, event: LogEvent) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in log.getvalue().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get(EVENT) == event]


def test_given_a_duplicate_when_consumed_then_its_skipped_line_carries_the_event(aws, consume, log):
    # Given the same order delivered twice
    aws.send(order("o-ev1"))
    consume()
    second = aws.send(order("o-ev1"))
    # When the duplicate is consumed
    consume()
    # Then exactly its line carries consumer.duplicate_skipped, with its message id
    assert [line["message_id"] for line in events(log, LogEvent.DUPLICATE_SKIPPED)] == [second]


def test_given_a_failing_record_when_receives_remain_then_its_retry_line_carries_the_event(aws, consume, log):
    mid = aws.send(order("o-ev2", behave="transient"))
    consume()
    [line] = events(log, LogEvent.RECORD_RETRIED)
    assert (line["message_id"], line["error_type"]) == (mid, "TransientError")
    assert events(log, LogEvent.RECORD_DEAD_LETTERED) == []


def test_given_a_failing_record_on_its_last_receive_then_its_dead_letter_line_carries_the_event(
    aws, consume, log
):
    mid = aws.send(order("o-ev3", behave="transient"))
    consume(max_receive_count=1, dead_letter_queue_url=aws.dlq_url)
    [line] = events(log, LogEvent.RECORD_DEAD_LETTERED)
    assert (line["message_id"], line["error_type"]) == (mid, "TransientError")
    assert events(log, LogEvent.RECORD_RETRIED) == []
