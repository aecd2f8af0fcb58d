"""Arrival: one reading of an incoming message, from a Lambda SQS record or a ReceiveMessage answer."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from sluice.arrival import Arrival, Unread, fallback_ids, receive_count
from sluice.envelope import ATTRIBUTE, Envelope, ErrorInfo, Seal, merge
from sluice.tracing import derived_traceparent
from sluice_local.testing import sqs_record

SEAL = Seal((b"k" * 32,))
FORGER = Seal((b"f" * 32,))
BODY = '{"order_id": "o-1"}'
QUEUE = "arn:aws:sqs:us-east-1:123456789012:work"
DLQ_SOURCE = "arn:aws:sqs:us-east-1:123456789012:orders"
HEADER = "Root=1-674a2f00-0123456789abcdef01234567;Parent=89abcdef01234567;Sampled=1"
TRACE_ID = "674a2f000123456789abcdef01234567"
PRODUCER_PARENT = "00-11111111111111111111111111111111-2222222222222222-01"
WHEN = datetime(2026, 11, 25, 6, 0, tzinfo=UTC)
HISTORY = Envelope(
    origin_id="first-hop-id",
    source=DLQ_SOURCE,
    attempts=2,
    first_failure=WHEN,
    last_error=ErrorInfo.of("TransientError", "downstream 503", at=WHEN, receives=5),
    trace=HEADER,
    traceparent=f"00-{TRACE_ID}-89abcdef01234567-01",
)


def string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def record(
    *,
    attributes: dict[str, dict[str, Any]] | None = None,
    system: dict[str, Any] | None = None,
    body: str = BODY,
) -> dict[str, Any]:
    """A Lambda SQS event record (camelCase attributes, binary values base64), a third receive."""
    sent = datetime.fromtimestamp(1795860000, UTC)
    return sqs_record(
        body, message_id="rec-1", attributes=attributes, receive_count=3, sent_at=sent, queue_arn=QUEUE,
        system=system,
    )  # fmt: skip


def message(
    *, attributes: dict[str, dict[str, Any]] | None = None, system: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One message of a boto3 ReceiveMessage answer."""
    api: dict[str, Any] = {
        "MessageId": "msg-1",
        "ReceiptHandle": "rh-msg-1",
        "Body": BODY,
        "Attributes": {"ApproximateReceiveCount": "5", **(system or {})},
    }
    if attributes:
        api["MessageAttributes"] = attributes
    return api


# --- both constructors -------------------------------------------------------------------------


def test_given_a_first_hop_record_when_read_then_it_is_its_own_identity_on_the_trace_it_arrived_with() -> (
    None
):
    # Given: a producer's message with its own attribute and an X-Ray header, no envelope
    raw = record(attributes={"tenant": string("acme")}, system={"AWSTraceHeader": HEADER})

    # When
    arrival = Arrival.from_record(raw, seal=SEAL)

    # Then
    assert (arrival.message_id, arrival.body, arrival.receipt_handle) == ("rec-1", BODY, "rh-rec-1")
    assert arrival.attributes == {"tenant": string("acme")}
    assert not arrival.carried
    assert arrival.problem is None
    env = arrival.envelope
    assert (env.origin_id, env.source, env.trace) == ("rec-1", QUEUE, HEADER)
    assert arrival.correlation_id == TRACE_ID
    assert arrival.ids() == {"message_id": "rec-1", "correlation_id": TRACE_ID}
    assert (arrival.receives, arrival.receive_count) == (3, 3)
    assert arrival.sent_at == datetime.fromtimestamp(1795860000, UTC)
    assert arrival.queue_arn == QUEUE


def test_given_a_dead_lettered_message_when_read_then_its_source_is_the_queue_sqs_moved_it_from() -> None:
    # Given: SQS's redrive policy moved a first-hop message (no envelope) to the DLQ
    api = message(system={"DeadLetterQueueSourceArn": DLQ_SOURCE, "AWSTraceHeader": HEADER})

    # When
    arrival = Arrival.from_message(api, seal=SEAL)

    # Then
    assert (arrival.message_id, arrival.receipt_handle, arrival.body) == ("msg-1", "rh-msg-1", BODY)
    assert (arrival.envelope.origin_id, arrival.envelope.source) == ("msg-1", DLQ_SOURCE)
    assert arrival.envelope.trace == HEADER
    assert arrival.correlation_id == TRACE_ID
    assert arrival.receives == 5
    assert arrival.queue_arn is None


def test_given_the_same_sealed_message_when_read_by_either_constructor_then_both_readings_agree() -> None:
    # Given: a message sluice sent on with its history and a user attribute
    attributes = merge({"tenant": string("acme")}, HISTORY, body=BODY, seal=SEAL)

    # When
    from_record = Arrival.from_record(record(attributes=attributes), seal=SEAL)
    from_message = Arrival.from_message(message(attributes=attributes), seal=SEAL)

    # Then: the history is kept whole, the identity is the first hop's, not this delivery's
    for arrival in (from_record, from_message):
        assert arrival.carried
        assert arrival.problem is None
        assert arrival.attributes == {"tenant": string("acme")}
        assert arrival.envelope == HISTORY
    assert from_record.envelope == from_message.envelope


def test_given_a_record_with_history_when_its_sourced_envelope_is_taken_then_only_the_source_changes() -> (
    None
):
    # Given: a record whose envelope names another first hop (as the delay pipeline's forward does)
    attributes = merge({}, HISTORY, body=BODY, seal=SEAL)
    arrival = Arrival.from_record(record(attributes=attributes), seal=SEAL)

    # When
    sourced = arrival.sourced_envelope

    # Then: the source is the queue it was received from, the rest of its history is kept
    assert sourced.source == QUEUE
    assert sourced.model_copy(update={"source": DLQ_SOURCE}) == arrival.envelope == HISTORY


def test_given_a_received_message_when_its_sourced_envelope_is_taken_then_nothing_is_guessed() -> None:
    # Given: a ReceiveMessage answer, which does not say which queue it came from
    arrival = Arrival.from_message(message(attributes=merge({}, HISTORY, body=BODY, seal=SEAL)), seal=SEAL)

    # When / Then: the envelope stays as it is
    assert arrival.sourced_envelope == arrival.envelope == HISTORY


def test_given_an_origin_without_a_source_when_read_then_the_queue_it_arrived_on_is_its_source() -> None:
    # Given: an envelope naming its origin but no queue (a request `sluice delay-dlq replay` sent back)
    replayed = Envelope(origin_id="orig-1", attempts=2)
    attributes = merge({}, replayed, body=BODY, seal=SEAL)

    # When: read from a Lambda record, and from a DLQ's ReceiveMessage answer
    from_record = Arrival.from_record(record(attributes=attributes), seal=SEAL)
    redriven = message(attributes=attributes, system={"DeadLetterQueueSourceArn": DLQ_SOURCE})
    from_message = Arrival.from_message(redriven, seal=SEAL)

    # Then: the queue each arrived from is its source; the rest of its history is kept
    assert from_record.envelope.source == QUEUE
    assert from_message.envelope.source == DLQ_SOURCE
    assert from_record.envelope.origin_id == from_message.envelope.origin_id == "orig-1"
    assert from_record.envelope.attempts == 2


def test_given_a_powertools_record_when_read_then_it_reads_as_its_raw_event() -> None:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord  # noqa: PLC0415

    raw = record(system={"AWSTraceHeader": HEADER})
    assert Arrival.from_record(SQSRecord(raw), seal=SEAL) == Arrival.from_record(raw, seal=SEAL)


def test_given_a_producer_traceparent_and_no_header_when_read_then_the_producers_trace_is_kept() -> None:
    arrival = Arrival.from_record(record(attributes={"traceparent": string(PRODUCER_PARENT)}), seal=SEAL)
    assert arrival.envelope.traceparent == PRODUCER_PARENT
    assert arrival.envelope.trace is None
    assert arrival.attributes == {"traceparent": string(PRODUCER_PARENT)}  # the user's attribute, untouched


def test_given_no_trace_at_all_when_read_twice_then_both_readings_derive_the_same_trace() -> None:
    first = Arrival.from_message(message(), seal=SEAL)
    again = Arrival.from_message(message(), seal=SEAL)
    assert first.envelope.traceparent == again.envelope.traceparent == derived_traceparent("msg-1")


# --- hostile input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        *(None, "", "zero", "0", "-4", "2.5", "1e3", "9" * 5000, True, 3.0, [], {"n": 1}),
        # not SQS's decimal digits, though Python's int() takes them
        *("1_0", "\u0663", "1\u0660", "\uff11", " 12 ", "12\n", "+3"),
    ],
    ids=lambda r: repr(r)[:20],
)
def test_given_a_missing_or_garbage_receive_count_when_parsed_then_it_is_unknown_and_counts_as_one(
    raw: Any,
) -> None:
    system = {} if raw is None else {"ApproximateReceiveCount": raw}
    assert receive_count(system) is None
    arrival = Arrival.from_record(record(system=system) | {"attributes": system}, seal=SEAL)
    assert (arrival.receives, arrival.receive_count) == (None, 1)


@pytest.mark.parametrize(("raw", "count"), [("1", 1), ("7", 7), ("12", 12), ("007", 7), (4, 4)])
def test_given_a_receive_count_when_parsed_then_it_is_the_number(raw: Any, count: int) -> None:
    assert receive_count({"ApproximateReceiveCount": raw}) == count


def test_given_no_system_attributes_when_parsed_then_the_receive_count_is_unknown() -> None:
    assert receive_count(None) is None
    assert Arrival.from_message({"MessageId": "m"}, seal=SEAL).receives is None


def test_given_a_forged_envelope_when_read_then_its_bookkeeping_is_ignored_with_the_reason() -> None:
    # Given: a producer claims another message's identity, attempts and source, signed with its own key
    forged = merge({}, HISTORY, body=BODY, seal=FORGER)

    # When
    arrival = Arrival.from_record(record(attributes=forged, system={"AWSTraceHeader": HEADER}), seal=SEAL)

    # Then: this delivery is its own identity; the unsealed trace context survives
    assert arrival.problem is not None
    assert "forged or altered" in arrival.problem
    assert arrival.carried  # the producer's unsealed fields are still an envelope
    env = arrival.envelope
    assert (env.origin_id, env.source, env.attempts, env.last_error) == ("rec-1", QUEUE, 0, None)
    assert env.trace == HEADER


def test_given_an_unsigned_envelope_with_bookkeeping_when_read_from_the_api_then_it_is_ignored() -> None:
    raw = merge({}, HISTORY, body=BODY, seal=None)  # no seal at all
    arrival = Arrival.from_message(message(attributes=raw), seal=SEAL)
    assert arrival.problem is not None
    assert "has no seal" in arrival.problem
    assert (arrival.envelope.origin_id, arrival.envelope.attempts) == ("msg-1", 0)


@pytest.mark.parametrize(
    "value",
    ["{not json", json.dumps({"v": 2, "origin_id": "x"}), json.dumps({"attempts": -1})],
    ids=["not-json", "other-version", "invalid-field"],
)
def test_given_a_malformed_envelope_when_read_then_it_is_a_first_hop_with_the_problem_named(
    value: str,
) -> None:
    arrival = Arrival.from_record(record(attributes={ATTRIBUTE: string(value)}), seal=SEAL)
    assert arrival.problem is not None
    assert arrival.problem.startswith("ignoring unreadable sluice envelope")
    assert not arrival.carried
    assert arrival.attributes == {}  # the broken envelope is not handed to the user as their attribute
    assert (arrival.envelope.origin_id, arrival.envelope.source) == ("rec-1", QUEUE)


def test_given_a_binary_envelope_attribute_when_read_then_it_is_refused_as_not_a_string() -> None:
    raw = {ATTRIBUTE: {"DataType": "Binary", "BinaryValue": b"\x00\x01"}}
    arrival = Arrival.from_record(record(attributes=raw), seal=SEAL)
    assert arrival.problem == "ignoring the sluice attribute: it is not a String"
    assert arrival.envelope.origin_id == "rec-1"


@pytest.mark.parametrize(
    "header",
    ["garbage", "Root=2-xyz", "Root=1-674a2f00-0123456789abcdef01234567;Parent=zz\n", "x" * 300, ""],
    ids=["garbage", "bad-root", "newline", "too-long", "empty"],
)
def test_given_a_bad_trace_header_when_read_then_it_is_dropped_and_a_trace_is_derived(header: str) -> None:
    # Given: an AWSTraceHeader SQS would refuse on the next send
    arrival = Arrival.from_record(record(system={"AWSTraceHeader": header}), seal=SEAL)

    # Then: not carried on (a send with it would be refused), the message still has one trace
    assert arrival.envelope.trace is None
    assert arrival.envelope.traceparent == derived_traceparent("rec-1")


def test_given_an_envelope_with_a_malformed_trace_when_read_then_the_arrived_header_replaces_it() -> None:
    # Given: a producer's (unsealed) envelope whose trace fields are not valid
    env = Envelope(trace="Root=nope", traceparent="00-zz")
    raw = merge({}, env, body=BODY, seal=None)

    # When
    arrival = Arrival.from_record(record(attributes=raw, system={"AWSTraceHeader": HEADER}), seal=SEAL)

    # Then
    assert arrival.envelope.trace == HEADER
    assert arrival.correlation_id == TRACE_ID


@pytest.mark.parametrize("sent", ["soon", "-1e30", "99999999999999999999"])
def test_given_a_garbage_sent_timestamp_when_read_then_it_is_unknown(sent: str) -> None:
    assert Arrival.from_record(record(system={"SentTimestamp": sent}), seal=SEAL).sent_at is None


# --- a record Arrival cannot read ----------------------------------------------------------------


def test_given_a_record_arrival_cannot_read_then_its_fallback_ids_are_its_id_trace_and_receive_count() -> (
    None
):
    # Given: a record whose message attributes are not what SQS sends, on a trace, at its 3rd receive
    raw = record(system={"AWSTraceHeader": HEADER})
    raw["messageAttributes"] = {"tenant": "not an attribute"}
    with pytest.raises(AttributeError):
        Arrival.from_record(raw, seal=SEAL)

    # When
    unread = fallback_ids(raw)

    # Then: what SQS itself says is still read
    assert unread == Unread(message_id="rec-1", correlation_id=TRACE_ID, receive_count=3)
    assert unread.ids() == {"message_id": "rec-1", "correlation_id": TRACE_ID}


def test_given_a_powertools_record_when_its_fallback_ids_are_read_then_they_are_its_raw_events() -> None:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord  # noqa: PLC0415

    raw = record(system={"AWSTraceHeader": HEADER})
    assert fallback_ids(SQSRecord(raw)) == fallback_ids(raw)


@pytest.mark.parametrize(
    "system",
    [
        "not a mapping",
        None,
        {"AWSTraceHeader": 42, "ApproximateReceiveCount": "garbage"},
        {"AWSTraceHeader": "Root=nonsense", "ApproximateReceiveCount": "0"},
    ],
)
def test_given_garbage_system_attributes_when_fallback_ids_are_read_then_nothing_is_guessed(
    system: Any,
) -> None:
    # Given: a hand-made record whose system attributes are garbage, and no string message id
    raw = {"messageId": 7, "attributes": system, "messageAttributes": "garbage"}

    # When
    unread = fallback_ids(raw)

    # Then: no id, no trace, and the receive count counts as the first
    assert unread == Unread(message_id=None, correlation_id=None, receive_count=1)
