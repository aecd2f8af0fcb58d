"""sluice_local.testing's factories build what Lambda hands a function: Powertools and sluice read them
as they read a real event (Given / When / Then)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSEvent, SQSRecord

from sluice.arrival import Arrival
from sluice.envelope import Envelope, ErrorInfo, merge
from sluice.logevents import LogEvent
from sluice_local.testing import QUEUE_ARN, RunningStack, lambda_context, sqs_event, sqs_record


def test_given_a_mapping_body_and_attributes_when_built_then_powertools_reads_the_record() -> None:
    # Given a body as a mapping, a String, a Binary and a Number attribute, a third receive
    sent = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    raw = sqs_record(
        {"shipment_id": "s-1"},
        message_id="m-1",
        attributes={
            "tenant": "acme",
            "blob": b"\x00\x01",
            "weight": {"DataType": "Number", "StringValue": "3"},
        },
        receive_count=3,
        sent_at=sent,
    )
    # When Powertools reads it
    record = SQSRecord(raw)
    # Then every part is where Lambda puts it
    assert record.message_id == "m-1"
    assert json.loads(record.body) == {"shipment_id": "s-1"}
    tenant, blob, weight = (record.message_attributes[name] for name in ("tenant", "blob", "weight"))
    assert tenant is not None
    assert blob is not None
    assert weight is not None
    assert tenant.string_value == "acme"
    assert base64.b64decode(blob.binary_value or "") == b"\x00\x01"
    assert weight.data_type == "Number"
    assert record.attributes.approximate_receive_count == "3"
    assert record.attributes.sent_timestamp == str(int(sent.timestamp() * 1000))
    assert record.event_source_arn == QUEUE_ARN
    assert record.aws_region == "us-east-1"


def test_given_a_record_when_sluice_reads_it_then_its_user_attributes_and_receive_count_arrive() -> None:
    # Given a record with a user attribute and a second receive
    raw = sqs_record("hello", message_id="m-2", attributes={"tenant": "acme"}, receive_count=2)
    # When it arrives at sluice
    arrival = Arrival.from_record(raw, seal=None)
    # Then sluice sees the body, its own attribute, the receive count and this message as the first hop
    assert arrival.body == "hello"
    assert arrival.attributes == {"tenant": {"DataType": "String", "StringValue": "acme"}}
    assert arrival.receives == 2
    assert arrival.envelope.origin_id == "m-2"
    assert arrival.envelope.source == QUEUE_ARN


def test_given_a_garbled_receive_count_when_built_then_it_passes_through_as_it_is() -> None:
    assert sqs_record(receive_count="garbage")["attributes"]["ApproximateReceiveCount"] == "garbage"


def test_given_bodies_and_records_when_an_event_is_built_then_each_is_one_record_in_order() -> None:
    # Given a text body, a mapping body and a record built before
    built = sqs_record("third", message_id="m-3")
    # When they make one event
    event = SQSEvent(sqs_event("first", {"n": 2}, built))
    # Then it holds three records in that order, with distinct ids
    records = list(event.records)
    assert [r.body for r in records] == ["first", '{"n": 2}', "third"]
    assert len({r.message_id for r in records}) == 3
    assert records[2].message_id == "m-3"


def test_given_a_context_when_time_passes_then_its_remaining_time_counts_down_from_the_timeout() -> None:
    context = lambda_context("shipments-consumer", timeout_seconds=5)
    assert context.function_name == "shipments-consumer"
    assert 0 < context.get_remaining_time_in_millis() <= 5000
    assert context.invoked_function_arn.endswith(":function:shipments-consumer")
    assert context.aws_request_id != lambda_context().aws_request_id


@pytest.mark.parametrize("body", [[1, 2], {"a": [1]}])
def test_given_a_json_body_when_built_then_the_record_carries_its_json(body: object) -> None:
    assert json.loads(sqs_record(body)["body"]) == body  # type: ignore[arg-type]


class _SeenStack:
    """Stands in for the observer: the log lines and queue contents a RunningStack looks at."""

    def __init__(self, lines: list[dict[str, Any]], queues: dict[str, list[dict[str, Any]]]) -> None:
        self.lines, self.queues = lines, queues
        self.outputs = {"WorkloadNames": "Orders,Refunds"}

    def logged(self, *events: LogEvent) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("event") in events]

    def peek(self, output: str) -> list[dict[str, Any]]:
        return self.queues.get(output, [])

    every_message = peek


def _ended(lines: list[dict[str, Any]], queues: dict[str, list[dict[str, Any]]], message_id: str) -> Any:
    running = RunningStack(_SeenStack(lines, queues), None, 0, Path())  # type: ignore[arg-type]
    return running._ended(message_id)


def _moved(message_id: str, origin: str, error: str) -> dict[str, Any]:
    """A message as a queue holds it once sluice moved it: its own id, the first hop's in its envelope."""
    envelope = Envelope(
        origin_id=origin, last_error=ErrorInfo(type="ConnectionError", message=error, at=datetime.now(UTC))
    )
    return {"MessageId": message_id, "MessageAttributes": merge({}, envelope, body="{}", seal=None)}


def test_given_a_message_in_the_dead_letter_queue_when_looked_for_then_its_last_error_is_the_reason() -> None:
    queues = {
        "RefundsDeadLetterQueueUrl": [_moved("dlq-1", "first-hop", "ledger unreachable")]
    }  # any workload's
    ended = _ended([], queues, "first-hop")
    assert (ended.kind, ended.message_id, ended.reason, ended.error_type) == (
        "dead-lettered", "dlq-1", "ledger unreachable", "ConnectionError",
    )  # fmt: skip


def test_given_a_redriven_message_processed_when_looked_for_then_its_first_hop_id_finds_it() -> None:
    lines = [{"event": "consumer.record_processed", "message_id": "hop-3", "correlation_id": "first-hop"}]
    ended = _ended(lines, {}, "first-hop")
    assert (ended.kind, ended.message_id) == ("processed", "hop-3")


def test_given_nothing_ended_yet_when_looked_for_then_there_is_no_outcome() -> None:
    lines = [{"event": "consumer.record_retried", "message_id": "m-1"}]
    queues = {"PoisonPillQueueUrl": [_moved("p-1", "someone-else", "bad")]}
    assert _ended(lines, queues, "m-1") is None
