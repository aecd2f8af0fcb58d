"""The soak's held claim-check objects (``sluice_local.soak.workload``): a transient order's object appears
only once its time has come AND the consumer's own log showed its receives failing, whatever the load.

Found by a loaded ``make test``: the object appeared on a timer, the consumer first received the order
after it, nothing failed, and the delete-failed sabotage run lost nothing.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools import Logger

from sluice.consumer import Consumer
from sluice.logevents import EVENT, LogEvent
from sluice_local.app import messages
from sluice_local.emulation.sqs_events import receive_event
from sluice_local.soak.logtail import LogTail
from sluice_local.soak.workload import OBSERVED, Sent, observe, release, upload_due

FAST = {"backoff_base_seconds": 1, "backoff_cap_seconds": 1, "backoff_floor_seconds": 0}
"""A failed receive comes back within a second (as the soak's --fast stack's)."""


def object_of(aws: Any, key: str) -> dict[str, Any] | None:
    try:
        return json.loads(aws.s3.get_object(Bucket=aws.bucket, Key=key)["Body"].read())
    except aws.s3.exceptions.NoSuchKey:
        return None


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "functions.log"


@pytest.fixture
def consume(aws, metrics, session, processor, context, log_path) -> Callable[..., dict[str, Any]]:
    """One invocation of the real consumer on the work queue's next message, logging to ``log_path``
    as the soak's functions do (their JSON lines in one file)."""

    def run(**settings: object) -> dict[str, Any]:
        handler = logging.FileHandler(log_path, encoding="utf-8")
        logger = Logger(service=f"sluice-test-{uuid.uuid4().hex[:8]}", logger_handler=handler)
        consumer = Consumer.from_env(
            processor, logger=logger, metrics_sink=metrics, environ=aws.env(**settings), session=session
        )
        try:
            return consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
        finally:
            handler.close()

    return run


def held_order(aws: Any, kind: str) -> Sent:
    """An order of ``kind`` sent as the soak sends it: a claim-check pointer to an object not there yet,
    whose time has already come."""
    s = Sent(f"s1-{uuid.uuid4().hex[:4]}", kind, key=f"{aws.prefix}soak/o-{uuid.uuid4().hex[:6]}")
    s.upload_at = 0.0
    s.message_ids.append(aws.send(messages.claim_check(aws.bucket, s.key)))
    return s


def test_given_a_transient_order_whose_time_came_then_its_object_waits_for_a_logged_failed_receive(
    aws, consume, log_path
):
    # Given a transient order whose time has come, not received yet
    s = held_order(aws, "transient")
    tail = LogTail(log_path)
    # When the soak's drain polls: nothing failed yet, so its object is not uploaded
    observe([s], tail.read(*OBSERVED), max_receives=3)
    upload_due(aws.s3, aws.bucket, [s])
    assert object_of(aws, s.key) is None
    assert s.upload_at is not None
    # When its first receive fails (the object is missing) and logs it
    result = consume(max_receive_count=3, **FAST)
    assert [f["itemIdentifier"] for f in result["batchItemFailures"]] == s.message_ids
    lines = tail.read(*OBSERVED)
    assert [(e[EVENT], s.key in e["error"]) for e in lines] == [(LogEvent.RECORD_RETRIED, True)]
    observe([s], lines, max_receives=3)
    upload_due(aws.s3, aws.bucket, [s])
    # Then its object is there, and its next receive processes it
    assert object_of(aws, s.key) == messages.order(s.business_id)
    assert s.upload_at is None
    assert consume(max_receive_count=3, **FAST)["batchItemFailures"] == []


def test_given_a_failed_receive_whose_time_has_not_come_then_the_object_still_waits(aws, consume, log_path):
    s = held_order(aws, "transient")
    s.upload_at = 100.0
    tail = LogTail(log_path)
    consume(max_receive_count=3, **FAST)
    observe([s], tail.read(*OBSERVED), max_receives=3)
    assert s.failed
    upload_due(aws.s3, aws.bucket, [s], now=99.0)
    assert object_of(aws, s.key) is None
    upload_due(aws.s3, aws.bucket, [s], now=100.0)
    assert object_of(aws, s.key) == messages.order(s.business_id)


def test_given_an_order_that_exhausts_its_retries_then_its_object_waits_until_it_is_dead_lettered(
    aws, consume, log_path
):
    # Given an exhausts-retries order (its time has come) on a queue of two receives
    s = held_order(aws, "exhausts-retries")
    tail = LogTail(log_path)
    # When its first receive fails: not yet
    consume(max_receive_count=2, dead_letter_queue_url=aws.dlq_url, **FAST)
    observe([s], tail.read(*OBSERVED), max_receives=2)
    upload_due(aws.s3, aws.bucket, [s])
    assert (s.failed, s.dead_lettered, object_of(aws, s.key)) == (True, False, None)
    # When its last receive fails and the consumer dead-letters it
    consume(max_receive_count=2, dead_letter_queue_url=aws.dlq_url, **FAST)
    lines = tail.read(*OBSERVED)
    assert [e[EVENT] for e in lines] == [LogEvent.RECORD_DEAD_LETTERED]
    observe([s], lines, max_receives=2)
    upload_due(aws.s3, aws.bucket, [s])
    # Then its object is there for the re-driven copy
    assert object_of(aws, s.key) == messages.order(s.business_id)


def test_given_a_held_order_when_a_redrive_line_names_its_origin_then_it_was_dead_lettered(aws):
    """Its receives may have died without logging (a crash, a timeout): the redrive saw it in the DLQ."""
    s = held_order(aws, "exhausts-retries")
    other = {EVENT: LogEvent.MESSAGE_REDRIVEN, "origin_id": "another", "action": "redrive"}
    observe([s], [other], max_receives=3)
    assert not s.failed
    line = {EVENT: LogEvent.REDRIVE_PLANNED, "origin_id": s.message_ids[0], "action": "redrive"}
    observe([s], [line], max_receives=3)
    upload_due(aws.s3, aws.bucket, [s])
    assert object_of(aws, s.key) == messages.order(s.business_id)


def test_given_orders_still_held_when_released_then_every_object_is_uploaded_once(aws):
    """The drain's way out when nothing moves any more (their messages ended without a failure seen)."""
    held = [held_order(aws, "transient"), held_order(aws, "exhausts-retries")]
    release(aws.s3, aws.bucket, held)
    assert [object_of(aws, s.key) for s in held] == [messages.order(s.business_id) for s in held]
    assert all(s.upload_at is None for s in held)


def test_given_a_log_being_written_when_tailed_then_each_whole_line_is_read_once(log_path):
    retried = json.dumps({EVENT: LogEvent.RECORD_RETRIED, "error": "x"})
    with log_path.open("w", encoding="utf-8") as f:
        f.write(f'{{"event": "other"}}\n{retried}\n{retried[:10]}')  # the last line is still being written
    tail = LogTail(log_path)
    assert len(tail.read(LogEvent.RECORD_RETRIED)) == 1
    with log_path.open("a", encoding="utf-8") as f:
        f.write(f"{retried[10:]}\n")
    assert len(tail.read(LogEvent.RECORD_RETRIED)) == 1
    assert tail.read(LogEvent.RECORD_RETRIED) == []
