"""A body in which the configured idempotency key path finds nothing: logged with its message id, counted,
then isolated or keyed by its message identity as configured; never a silent fallback (Given / When /
Then, against in-process moto)."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from aws_lambda_powertools import Logger

from sluice.consumer import Consumer
from sluice.consumer.record import SluiceRecord
from sluice.logevents import EVENT, LogEvent
from sluice_local.emulation.sqs_events import drain, receive_event
from tests.doubles import envelope_of, last_error_of

MISSING = "IdempotencyKeyMissing"


class Recorder:
    """A processor that keeps every record it is given."""

    def __init__(self) -> None:
        self.records: list[SluiceRecord] = []

    def __call__(self, record: SluiceRecord) -> None:
        self.records.append(record)


@pytest.fixture
def log() -> io.StringIO:
    return io.StringIO()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def consume(aws, metrics, session, recorder, context, log) -> Callable[..., dict[str, Any]]:
    """Receive one record from the work queue and consume it with the given settings (key path order_id)."""

    def run(**settings: object) -> dict[str, Any]:
        logger = Logger(
            service=f"sluice-test-{uuid.uuid4().hex[:8]}", logger_handler=logging.StreamHandler(log)
        )
        consumer = Consumer.from_env(
            recorder, logger=logger, metrics_sink=metrics, environ=aws.env(**settings), session=session
        )
        return consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)

    return run


def missing_lines(log: io.StringIO) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in log.getvalue().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get(EVENT) == LogEvent.IDEMPOTENCY_KEY_MISSING]


# --- poison (the default) ----------------------------------------------------------------------------


def test_given_a_body_without_its_key_when_consumed_by_default_then_it_is_poisoned_with_the_reason(
    aws, consume, recorder, metrics, log
):
    # Given the key path order_id and a body that has no order_id
    mid = aws.send({"refund_id": "r-1", "amount_cents": 300})
    # When it is consumed with SLUICE_IDEMPOTENCY_KEY_MISSING left at its default
    response = consume()
    # Then it is isolated to the poison queue with the reason, not processed, not retried
    assert response["batchItemFailures"] == []
    assert recorder.records == []
    [poisoned] = drain(aws.sqs, aws.poison_url)
    assert json.loads(poisoned["Body"]) == {"refund_id": "r-1", "amount_cents": 300}
    assert envelope_of(poisoned).origin_id == mid
    reason = last_error_of(poisoned)
    assert reason.type == "PermanentError"
    assert reason.message == (
        "idempotency key path 'order_id' yields nothing in the body (SLUICE_IDEMPOTENCY_KEY_MISSING=poison; "
        "the stack parameters IdempotencyKeyJmesPath and IdempotencyKeyMissing set them)"
    )
    # And the log line names the message, the path and the outcome; the metric counts it
    [line] = missing_lines(log)
    assert (line["message_id"], line["key_path"], line["outcome"], line["level"]) == (
        mid,
        "order_id",
        "poison",
        "WARNING",
    )
    assert metrics.values[MISSING] == 1
    assert metrics.values["RecordsIsolated"] == 1
    assert metrics.values["RecordsProcessed"] == 0


@pytest.mark.parametrize(
    "body",
    [{"order_id": None}, {"order_id": ""}, {"order_id": []}, {"order_id": {}}, [1, 2], 42, "o-1"],
    ids=["null", "empty-string", "empty-list", "empty-object", "array", "number", "string"],
)
def test_given_a_body_the_key_path_yields_nothing_in_when_consumed_then_it_is_counted_and_poisoned(
    aws, consume, recorder, metrics, log, body
):
    # Given a body whose key value is empty, or which is no JSON object at all
    mid = aws.send(json.dumps(body))
    # When consumed
    consume()
    # Then it is the same missing key: logged with its id, counted, poisoned
    assert [line["message_id"] for line in missing_lines(log)] == [mid]
    assert metrics.values[MISSING] == 1
    assert len(drain(aws.sqs, aws.poison_url)) == 1
    assert recorder.records == []


# --- message identity --------------------------------------------------------------------------------


def test_given_a_body_without_its_key_when_configured_for_message_identity_then_it_is_processed_under_it(
    aws, consume, recorder, metrics, log
):
    # Given the key path order_id, a body without it, and SLUICE_IDEMPOTENCY_KEY_MISSING=message-identity
    mid = aws.send({"refund_id": "r-2"})
    # When it is consumed
    response = consume(idempotency_key_missing="message-identity")
    # Then it is processed, keyed by its message identity, and nothing is poisoned
    assert response["batchItemFailures"] == []
    [record] = recorder.records
    assert record.idempotency_key == f"msg:{mid}"
    assert drain(aws.sqs, aws.poison_url) == []
    # And still the log line names the message and the outcome, and the metric counts it
    [line] = missing_lines(log)
    assert (line["message_id"], line["key_path"], line["outcome"]) == (mid, "order_id", "message-identity")
    assert metrics.values[MISSING] == 1
    assert metrics.values["RecordsProcessed"] == 1


def test_given_message_identity_when_the_same_keyless_body_is_sent_twice_then_both_run_and_both_are_counted(
    aws, consume, recorder, metrics, log
):
    # Given the same keyless body sent twice by a producer (two message ids)
    first = aws.send({"refund_id": "r-3"})
    consume(idempotency_key_missing="message-identity")
    second = aws.send({"refund_id": "r-3"})
    # When the second is consumed
    consume(idempotency_key_missing="message-identity")
    # Then both ran (what a business key would have deduplicated), and each is on record
    assert [r.message_id for r in recorder.records] == [first, second]
    assert [line["message_id"] for line in missing_lines(log)] == [first, second]
    assert metrics.values[MISSING] == 2


# --- no false alarms -----------------------------------------------------------------------------------


def test_given_a_body_with_its_key_when_consumed_then_nothing_is_logged_or_counted(
    aws, consume, recorder, metrics, log
):
    aws.send({"order_id": "o-1"})
    consume()
    [record] = recorder.records
    assert record.idempotency_key == 'body:"o-1"'
    assert missing_lines(log) == []
    assert metrics.values[MISSING] == 0


def test_given_no_key_path_when_a_keyless_body_is_consumed_then_message_identity_is_no_missing_key(
    aws, consume, recorder, metrics, log
):
    # Given no key path configured (the template's default)
    mid = aws.send({"refund_id": "r-4"})
    # When consumed, Then it is keyed by its identity as configured: no warning, no count, not poisoned
    consume(idempotency_key_jmespath="")
    assert [r.idempotency_key for r in recorder.records] == [f"msg:{mid}"]
    assert missing_lines(log) == []
    assert metrics.values[MISSING] == 0
    assert drain(aws.sqs, aws.poison_url) == []


def test_given_a_record_with_a_side_effect_then_every_key_stored_starts_with_the_functions_name(
    aws, metrics, session, context
):
    # The consumer role's IdempotencyRecords statement reaches "<consumer function name>.*" only
    # (workloads.yaml; tests/unit/test_template.py): every item the consumer writes must be under it
    def charge(record: SluiceRecord) -> None:
        record.once("charge", lambda: {"charged": True})

    consumer = Consumer.from_env(
        charge,
        logger=Logger(service="sluice-test-keys"),
        metrics_sink=metrics,
        environ=aws.env(),
        session=session,
    )
    aws.send({"order_id": "o-9"})
    consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    ids = [item["id"]["S"] for item in aws.dynamodb.scan(TableName=aws.table)["Items"]]
    function = aws.env()["AWS_LAMBDA_FUNCTION_NAME"]
    assert len(ids) == 2  # the record's and its effect's
    assert all(i.startswith(f"{function}.") for i in ids), ids
