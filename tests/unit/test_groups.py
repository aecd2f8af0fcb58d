"""The message group id (sluice.groups): SQS's rule, where a hop finds it, and every send keeping it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sluice.arrival import Arrival
from sluice.batchsend import Outgoing, send_batch
from sluice.delay.schedule import Parked, send_delayed
from sluice.delay.scheduler import plan
from sluice.envelope import ATTRIBUTE, Envelope, merge
from sluice.errors import InvalidEventError
from sluice.groups import MAX_GROUP_ID, MalformedGroupId, check_group_id, group_of, group_param
from sluice.poison import isolate
from tests.doubles import FakeSqs

WORK = "https://sqs.us-east-1.amazonaws.com/123456789012/work"
ARN = "arn:aws:sqs:us-east-1:123456789012:work"
NOW = datetime(2026, 11, 28, 3, 0, tzinfo=UTC)


def _record(*, system: dict[str, str] | None = None, envelope: Envelope | None = None) -> dict[str, Any]:
    attributes = {}
    if envelope is not None:
        attributes[ATTRIBUTE] = {"dataType": "String", "stringValue": envelope.to_json()}
    return {
        "messageId": "m-1",
        "receiptHandle": "rh",
        "body": "{}",
        "attributes": {"ApproximateReceiveCount": "1", **(system or {})},
        "messageAttributes": attributes,
        "eventSourceARN": ARN,
    }


@pytest.mark.parametrize(
    "value", ["tenant-42", "a", "x" * MAX_GROUP_ID, "acme/eu:1!#$%&'()*+,-.;<=>?@[\\]^_`{|}~\""]
)
def test_a_group_id_of_sqs_allowed_characters_up_to_128_is_accepted(value: str) -> None:
    assert check_group_id(value) == value


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("", "must not be empty"),
        ("x" * (MAX_GROUP_ID + 1), "at most 128 characters, got 129"),
        ("tenant 42", "only letters, digits and ASCII punctuation"),
        ("tenant\n42", "only letters, digits and ASCII punctuation"),
        ("tenant-é", "only letters, digits and ASCII punctuation"),
        (42, "must be a string, got int"),
    ],
)
def test_a_malformed_group_id_is_refused_with_a_clear_error(value: object, says: str) -> None:
    with pytest.raises(MalformedGroupId, match=says) as raised:
        check_group_id(value)
    assert isinstance(raised.value, InvalidEventError)  # one exception tree: a ValueError too
    assert isinstance(raised.value, ValueError)
    assert check_group_id(None) is None


def test_the_group_sqs_delivered_wins_over_the_envelope_and_a_malformed_carried_one_is_dropped() -> None:
    assert group_of({"MessageGroupId": "acme"}, "other") == ("acme", None)
    assert group_of({}, "acme") == ("acme", None)
    assert group_of(None, None) == (None, None)
    group, problem = group_of({}, "bad group")
    assert group is None
    assert problem is not None
    assert "ignoring the envelope's group id" in problem
    assert group_param("bad group") == {}
    assert group_param("acme") == {"MessageGroupId": "acme"}


def test_an_arrival_writes_the_delivered_group_into_its_envelope() -> None:
    arrival = Arrival.from_record(_record(system={"MessageGroupId": "tenant-7"}), seal=None)
    assert arrival.group == "tenant-7"
    assert arrival.envelope.group == "tenant-7"
    assert arrival.sourced_envelope.group == "tenant-7"  # what dead-lettering and isolation send on
    assert arrival.problem is None


def test_an_arrival_reads_the_group_a_parked_envelope_carried_and_drops_a_malformed_one_with_a_problem() -> (
    None
):
    carried = Arrival.from_record(_record(envelope=Envelope(group="tenant-7")), seal=None)
    assert carried.group == "tenant-7"
    forged = Arrival.from_record(_record(envelope=Envelope(group="x" * 200, deliver_at=NOW)), seal=None)
    assert forged.group is None
    assert forged.envelope.group is None
    assert forged.envelope.deliver_at == NOW  # the rest of the envelope is kept
    assert forged.problem is not None
    assert "at most 128 characters" in forged.problem


def test_a_batch_entry_carries_the_group_id_and_one_without_a_group_carries_none() -> None:
    sqs = FakeSqs()
    refused = send_batch(sqs, WORK, [Outgoing("a", "A", group="tenant-1"), Outgoing("b", "B")])  # type: ignore[arg-type]
    assert refused == []
    [call] = sqs.batch_calls
    entries = {e["MessageBody"]: e for e in call["Entries"]}
    assert entries["A"]["MessageGroupId"] == "tenant-1"
    assert "MessageGroupId" not in entries["B"]


def test_a_poison_isolation_sends_the_group_id() -> None:
    sqs = FakeSqs()
    isolate(
        sqs,  # type: ignore[arg-type]
        poison_queue_url=WORK,
        body="{}",
        attributes={},
        envelope=Envelope(origin_id="m-1", group="tenant-3"),
        seal=None,
    )
    [sent] = sqs.sent
    assert sent["MessageGroupId"] == "tenant-3"
    assert json.loads(sent["MessageAttributes"][ATTRIBUTE]["StringValue"])["group"] == "tenant-3"


def test_send_delayed_carries_the_group_in_the_envelope_and_refuses_a_malformed_one_before_sending() -> None:
    fake = FakeSqs()
    sqs: Any = fake
    send_delayed(
        sqs, delay_queue_url=WORK, target=WORK, body="{}", delay_seconds=60, group_id="t-9", now=lambda: NOW
    )
    [sent] = fake.sent
    assert sent["MessageGroupId"] == "t-9"
    assert json.loads(sent["MessageAttributes"][ATTRIBUTE]["StringValue"])["group"] == "t-9"
    with pytest.raises(MalformedGroupId):
        send_delayed(sqs, delay_queue_url=WORK, target=WORK, body="{}", delay_seconds=60, group_id="t 9")
    assert len(fake.sent) == 1


def _parked(group: object) -> Parked:
    envelope = Envelope(origin_id="m-1", group=group, target=WORK, deliver_at=NOW + timedelta(hours=3))
    return Parked("m-1", WORK, NOW + timedelta(hours=3), "{}", merge({}, envelope, body="{}", seal=None))


def test_a_parked_message_is_sent_with_its_group_and_a_schedule_input_names_it() -> None:
    out = _parked("tenant-5").outgoing(NOW)
    assert out.group == "tenant-5"
    [spec] = plan([_parked("tenant-5")], NOW, 60).schedules
    assert json.loads(spec.input)["MessageGroupId"] == "tenant-5"


def test_a_parked_message_with_a_malformed_group_is_sent_without_one_and_says_why() -> None:
    parked = _parked("bad group")
    out, problem = parked.sendable(NOW, seal=None, offload=lambda body: (body, {}))
    assert out.group is None
    assert problem is not None
    assert "group id" in problem
    [spec] = plan([parked], NOW, 60).schedules
    assert "MessageGroupId" not in json.loads(spec.input)
