"""What the operator CLI reads of a received message (sluice_cli.messages.Received) and what the redrive
reads of a dead-lettered one (sluice.redrive.plan.DlqMessage): both through sluice.arrival.Arrival."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from sluice.arrival import Arrival
from sluice.envelope import Envelope, Seal, merge
from sluice.redrive.plan import DlqMessage
from sluice_cli.messages import QueueScan, Received

SEAL = Seal((b"k" * 32,))
FORGER = Seal((b"f" * 32,))
BODY = '{"order_id": "o-1"}'
DLQ_SOURCE = "arn:aws:sqs:us-east-1:123456789012:orders"


def message(*, attributes: dict[str, Any] | None = None, system: dict[str, str] | None = None) -> Any:
    """One message of a boto3 ReceiveMessage answer."""
    api: dict[str, Any] = {
        "MessageId": "msg-1",
        "ReceiptHandle": "rh-1",
        "Body": BODY,
        "Attributes": {"ApproximateReceiveCount": "4", "SentTimestamp": "1795860000000", **(system or {})},
    }
    if attributes is not None:
        api["MessageAttributes"] = attributes
    return api


@pytest.mark.parametrize("sent", ["99999999999999999999", "-99999999999999999999", "soon", ""])
def test_given_a_send_time_no_date_holds_when_summarised_then_it_is_unknown_not_a_crash(sent: str) -> None:
    # Given a message whose SentTimestamp is garbage (a hand-made or hostile message)
    received = Received.from_api(message(system={"SentTimestamp": sent}), None)
    # When the CLI summarises it, then its send time is unknown (it raised OSError/OverflowError)
    assert received.sent_at is None
    assert received.summary()["sentAt"] is None


def test_given_a_message_when_received_then_its_send_time_and_receive_count_are_arrivals() -> None:
    received = Received.from_api(message(), None)
    assert received.sent_at == datetime.fromtimestamp(1795860000, UTC)
    assert received.receives == 4
    assert received.receipt_handle == "rh-1"


def test_given_a_carried_envelope_when_received_then_it_is_shown_as_carried_not_filled_in() -> None:
    # Given an envelope sealed without an origin id or a trace (an operator's tool shows what travels)
    env = Envelope(attempts=0, deliver_at=datetime(2026, 11, 26, tzinfo=UTC), target="https://q")
    attributes = merge({"tenant": {"DataType": "String", "StringValue": "acme"}}, env, body=BODY, seal=SEAL)
    # When the CLI reads it with the stack's seal
    received = Received.from_api(
        message(attributes=attributes, system={"DeadLetterQueueSourceArn": DLQ_SOURCE}), SEAL
    )
    # Then the envelope is the one carried: no identity, source or trace invented for it
    assert received.envelope is not None
    assert (received.envelope.origin_id, received.envelope.source, received.envelope.trace) == (
        None,
        None,
        None,
    )
    assert received.envelope.target == "https://q"
    assert received.user_attributes == {"tenant": {"DataType": "String", "StringValue": "acme"}}
    assert received.envelope_problem is None


def test_given_no_envelope_when_received_then_there_is_none_to_show() -> None:
    received = Received.from_api(message(), None)
    assert received.envelope is None
    assert received.summary()["originId"] is None


def test_given_a_forged_envelope_when_received_with_the_seal_then_the_problem_is_shown() -> None:
    env = Envelope(origin_id="someone-else", attempts=7)
    attributes = merge({}, env, body=BODY, seal=FORGER)
    received = Received.from_api(message(attributes=attributes), SEAL)
    assert received.envelope_problem is not None
    assert "forged or altered" in received.envelope_problem
    assert received.envelope is None or received.envelope.origin_id is None


def test_given_a_dead_lettered_message_when_read_then_it_is_arrivals_one_reading() -> None:
    # Given a message received from a DLQ
    api = message(
        attributes=merge({}, Envelope(origin_id="first"), body=BODY, seal=SEAL),
        system={"DeadLetterQueueSourceArn": DLQ_SOURCE},
    )
    # When the redrive reads it
    dlq = DlqMessage.from_api(api)
    # Then what it holds is Arrival's reading, and its envelope is verified only when split with a seal
    assert dlq.arrival == Arrival.from_message(api, seal=None)
    assert (dlq.message_id, dlq.receipt_handle, dlq.body, dlq.receives) == ("msg-1", "rh-1", BODY, 4)
    assert dlq.system["DeadLetterQueueSourceArn"] == DLQ_SOURCE
    _, envelope, problem = dlq.split(SEAL)
    assert (envelope.origin_id, problem) == ("first", None)
    _, forged, problem = dlq.split(FORGER)
    assert forged.origin_id == "msg-1"  # not sealed with this key: its own identity, the reason given
    assert problem is not None


def test_given_a_message_without_a_receipt_handle_when_read_for_redrive_then_it_is_refused() -> None:
    api = message()
    del api["ReceiptHandle"]
    with pytest.raises(KeyError):
        DlqMessage.from_api(api)


class _Receives:
    """An SQS stand-in answering each receive with the next prepared batch of message ids."""

    def __init__(self, *batches: list[str]) -> None:
        self.batches = list(batches)

    def receive_message(self, **_: object) -> dict[str, object]:
        ids = self.batches.pop(0) if self.batches else []
        return {"Messages": [{"MessageId": i, "ReceiptHandle": f"rh-{i}", "Body": "{}"} for i in ids]}


def test_given_held_messages_reappearing_when_scanned_then_the_rest_of_the_queue_is_still_reached() -> None:
    # Given a queue whose first ten messages come back (their hold ran out while the scan went on) before
    # five it has not seen yet, as on a poison queue mostly holding another workload's pills
    first = [f"other-{i}" for i in range(10)]
    sqs = _Receives(first, first, first, [f"mine-{i}" for i in range(5)], [])
    scan = QueueScan(sqs, "https://sqs.local/poison")  # type: ignore[arg-type]
    # When it is scanned, Then every message is reached once: the receives of old ones do not end it
    assert [[m.message_id for m in batch] for batch in scan.batches()] == [
        first,
        [f"mine-{i}" for i in range(5)],
    ]


def test_given_only_old_messages_for_long_when_scanned_then_the_scan_ends() -> None:
    sqs = _Receives(*([["a", "b"]] * 50))
    scan = QueueScan(sqs, "https://sqs.local/poison")  # type: ignore[arg-type]
    assert [len(batch) for batch in scan.batches()] == [2]
    assert len(sqs.batches) > 40  # it stopped after a few receives of nothing new, not at the end
