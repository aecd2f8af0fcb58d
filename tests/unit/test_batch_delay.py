"""The batch-delay function reads each record through Arrival (no AWS: a recording SQS client; every
record here is due within the direct-send threshold, so nothing is parked)."""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aws_lambda_powertools import Logger

from sluice.delay.parker import BatchDelay
from sluice.delay.settings import DelaySettings
from sluice.envelope import Envelope, merge
from sluice_local.testing import sqs_record
from tests.conftest import ENVELOPE_KEY_ARN, TEST_SEAL
from tests.doubles import FakeSqs, RecordingMetrics, envelope_of

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
DELAY_QUEUE = "arn:aws:sqs:us-east-1:123456789012:delay"
TARGET = "https://sqs.us-east-1.amazonaws.com/123456789012/work"
ELSEWHERE = "https://sqs.us-east-1.amazonaws.com/123456789012/elsewhere"
POISON = "https://sqs.us-east-1.amazonaws.com/123456789012/poison"
MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:delay"


def delayer(sqs: FakeSqs, sink: RecordingMetrics, log: io.StringIO | None = None) -> BatchDelay:
    settings = DelaySettings.from_env(
        {
            "SLUICE_DELAY_BUCKET": "parked",
            "SLUICE_DELAY_STATE_MACHINE_ARN": MACHINE,
            "SLUICE_DELAY_TARGETS": TARGET,
            "SLUICE_POISON_QUEUE_URL": POISON,
            "SLUICE_ENVELOPE_KEY_SECRET": ENVELOPE_KEY_ARN,
        }
    )
    return BatchDelay(
        settings=settings,
        sqs=sqs,  # type: ignore[arg-type]
        s3=None,  # type: ignore[arg-type]  # nothing is parked or offloaded here
        sfn=None,  # type: ignore[arg-type]
        logger=Logger(service=f"sluice-test-{uuid.uuid4().hex}", stream=log or io.StringIO()),
        metrics_sink=sink,
        seal=TEST_SEAL,
        clock=lambda: NOW,
    )


def record(message_id: str, envelope: Envelope, *, receives: str = "1", body: str = "{}") -> dict[str, Any]:
    """A Lambda SQS record from the delay queue, its envelope sealed with the stack's key."""
    attributes = merge({}, envelope, body=body, seal=TEST_SEAL)
    return sqs_record(
        body, message_id=message_id, attributes=attributes, receive_count=receives, sent_at=NOW,
        queue_arn=DELAY_QUEUE,
    )  # fmt: skip


def request(target: str = TARGET, **fields: Any) -> Envelope:
    return Envelope(deliver_at=NOW + timedelta(seconds=30), target=target, **fields)


@pytest.mark.parametrize("receives", ["garbage", "", "1_0", " 2 ", "\u0663"])
def test_given_an_invalid_request_with_a_garbage_receive_count_then_it_alone_is_isolated(
    receives: str,
) -> None:
    # Given a batch: a request to a queue not allowed, whose receive count is garbage, and a valid one
    sqs, sink = FakeSqs(), RecordingMetrics()
    event = {
        "Records": [
            record("bad", request(target=ELSEWHERE), receives=receives),
            record("good", request(), body="due"),
        ]
    }
    # When the batch-delay function handles it (its receive count failed the whole batch before)
    response = delayer(sqs, sink).handle(event)
    # Then the invalid one is isolated with a receive count of 1 and its batch mate is sent
    assert response == {"batchItemFailures": []}
    [poisoned] = sqs.sent
    assert poisoned["QueueUrl"] == POISON
    error = envelope_of(poisoned).last_error
    assert error is not None
    assert "not in the allowlist" in error.message
    assert error.receives == 1
    assert sqs.bodies() == [["due"]]
    assert (sink.values["RecordsIsolated"], sink.values["MessagesSentDirect"]) == (1, 1)


def test_given_a_request_with_an_identity_and_no_source_then_its_source_is_the_delay_queue() -> None:
    # Given a sealed request that has its identity but no source: what `sluice delay-dlq replay` sends
    # back (it gives a request its id on the delay queue as origin_id, and no source)
    sqs, sink = FakeSqs(), RecordingMetrics()
    event = {"Records": [record("replayed", request(origin_id="first-delay-id"))]}
    # When it is sent on to its target
    assert delayer(sqs, sink).handle(event) == {"batchItemFailures": []}
    # Then, as before batch-delay read through Arrival, the queue it arrived from is its source
    [[entry]] = [call["Entries"] for call in sqs.batch_calls]
    sent = envelope_of(entry)
    assert (sent.origin_id, sent.source) == ("first-delay-id", DELAY_QUEUE)


def test_given_a_request_with_a_source_then_it_is_kept() -> None:
    sqs, sink = FakeSqs(), RecordingMetrics()
    source = "arn:aws:sqs:us-east-1:123456789012:orders"
    event = {"Records": [record("r", request(origin_id="o", source=source))]}
    assert delayer(sqs, sink).handle(event) == {"batchItemFailures": []}
    [[entry]] = [call["Entries"] for call in sqs.batch_calls]
    assert envelope_of(entry).source == source


def test_given_a_new_request_then_its_identity_is_this_delivery_and_its_source_the_delay_queue() -> None:
    sqs, sink = FakeSqs(), RecordingMetrics()
    assert delayer(sqs, sink).handle({"Records": [record("new", request())]}) == {"batchItemFailures": []}
    [[entry]] = [call["Entries"] for call in sqs.batch_calls]
    sent = envelope_of(entry)
    assert (sent.origin_id, sent.source) == ("new", DELAY_QUEUE)


HEADER = "Root=1-674a2f00-0123456789abcdef01234567;Parent=89abcdef01234567;Sampled=1"


@pytest.mark.parametrize("system", [{"AWSTraceHeader": HEADER}, "not a mapping"])
def test_given_a_record_that_cannot_be_read_then_it_alone_is_retried_and_logged_with_what_sqs_says(
    system: Any,
) -> None:
    # Given a batch: a record whose attributes are not what SQS sends, and a valid request
    sqs, sink, log = FakeSqs(), RecordingMetrics(), io.StringIO()
    unreadable = record("unreadable", request())
    unreadable["messageAttributes"] = {"tenant": "not an attribute"}
    if isinstance(system, dict):
        unreadable["attributes"].update(system)
    else:
        unreadable["attributes"] = system
    event = {"Records": [unreadable, record("good", request(), body="due")]}
    # When the batch-delay function handles it
    response = delayer(sqs, sink, log).handle(event)
    # Then only the unreadable one is retried, its batch mate is sent ...
    assert response == {"batchItemFailures": [{"itemIdentifier": "unreadable"}]}
    assert sqs.bodies() == [["due"]]
    # ... and the line about it names it and the trace it arrived on (read by sluice.arrival.fallback_ids)
    [line] = [e for e in map(json.loads, log.getvalue().splitlines()) if e["level"] == "ERROR"]
    assert line["message_id"] == "unreadable"
    expected = "674a2f000123456789abcdef01234567" if isinstance(system, dict) else None
    assert line.get("correlation_id") == expected  # (Powertools leaves out a None)
