"""SendMessageBatch (sluice.batchsend): chunking within SQS limits and retrying only what failed."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    ParamValidationError,
    ReadTimeoutError,
)
from moto import mock_aws

from sluice.batchsend import Outgoing, Refused, chunks, send_batch
from sluice.envelope import SendAttributes
from sluice.limits import MAX_BATCH_ENTRIES
from sluice.sqs import attribute_bytes
from tests.doubles import FakeSqs

QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/work"


class Sleeps:
    def __init__(self) -> None:
        self.seconds: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)


def _messages(count: int, size: int = 10, prefix: str = "b") -> list[Outgoing]:
    return [Outgoing(f"k{i}", f"{prefix}{i:03d}".ljust(size, ".")) for i in range(count)]


def _client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} happened"}}, "SendMessageBatch")


def _send(sqs: object, messages: list[Outgoing], **kwargs: Any) -> tuple[list[Refused], Sleeps]:
    sleeps = Sleeps()
    refused = send_batch(sqs, QUEUE_URL, messages, sleep=sleeps, **kwargs)  # type: ignore[arg-type]
    return refused, sleeps


def _within_full_jitter(sleeps: Sleeps, base_delay: float) -> None:
    for attempt, seconds in enumerate(sleeps.seconds, start=1):
        assert 0.0 <= seconds <= min(5.0, base_delay * 2 ** (attempt - 1)), (attempt, seconds)


# --- chunks ------------------------------------------------------------------------------------


def test_given_no_messages_when_chunked_then_there_are_no_chunks() -> None:
    assert chunks([]) == []


@pytest.mark.parametrize(
    ("count", "sizes"), [(1, [1]), (10, [10]), (11, [10, 1]), (25, [10, 10, 5]), (30, [10, 10, 10])]
)
def test_given_small_messages_when_chunked_then_each_chunk_has_at_most_ten_entries(
    count: int, sizes: list[int]
) -> None:
    messages = _messages(count)

    result = chunks(messages)

    assert [len(chunk) for chunk in result] == sizes
    assert [m for chunk in result for m in chunk] == messages


def test_given_a_byte_limit_when_chunked_then_no_chunk_exceeds_it_and_an_exact_fit_is_kept() -> None:
    messages = _messages(7, size=100)

    result = chunks(messages, max_bytes=300)

    assert [len(chunk) for chunk in result] == [3, 3, 1]
    assert all(sum(m.size() for m in chunk) <= 300 for chunk in result)
    assert [m for chunk in result for m in chunk] == messages


def test_given_attributes_when_chunked_then_they_count_towards_the_byte_limit() -> None:
    attributes = {"tenant": {"DataType": "String", "StringValue": "x" * 40}}
    messages = [Outgoing(f"k{i}", "y" * 50, attributes) for i in range(4)]
    per_message = 50 + attribute_bytes(attributes)

    result = chunks(messages, max_bytes=2 * per_message)

    assert messages[0].size() == per_message
    assert [len(chunk) for chunk in result] == [2, 2]


def test_given_a_message_larger_than_the_limit_when_chunked_then_it_goes_alone_in_its_own_chunk() -> None:
    small = _messages(4, size=100)
    huge = Outgoing("huge", "h" * 1_000)
    messages = [small[0], small[1], huge, small[2], small[3]]

    result = chunks(messages, max_bytes=250)

    assert result == [[small[0], small[1]], [huge], [small[2], small[3]]]


def test_given_only_an_oversized_message_when_chunked_then_it_is_still_sent() -> None:
    huge = Outgoing("huge", "h" * 1_000)

    assert chunks([huge], max_bytes=10) == [[huge]]


def test_given_multibyte_bodies_when_chunked_then_utf8_bytes_are_counted() -> None:
    messages = [Outgoing(f"k{i}", "€" * 10) for i in range(3)]  # 30 bytes each, 10 characters

    assert [len(chunk) for chunk in chunks(messages, max_bytes=60)] == [2, 1]


def test_given_random_messages_when_chunked_then_limits_order_and_greediness_hold() -> None:
    rng = random.Random(20240601)
    for _ in range(200):
        max_bytes = rng.randint(50, 2_000)
        messages = [Outgoing(f"k{i}", "x" * rng.randint(0, 600)) for i in range(rng.randint(0, 40))]

        result = chunks(messages, max_bytes=max_bytes)

        assert [m for chunk in result for m in chunk] == messages
        for index, chunk in enumerate(result):
            assert 1 <= len(chunk) <= MAX_BATCH_ENTRIES
            total = sum(m.size() for m in chunk)
            assert total <= max_bytes or len(chunk) == 1, (max_bytes, [m.size() for m in chunk])
            if index + 1 < len(result):  # greedy: the next message did not fit here
                following = result[index + 1][0]
                assert len(chunk) == MAX_BATCH_ENTRIES or total + following.size() > max_bytes


# --- send_batch: entries -----------------------------------------------------------------------


def test_given_messages_that_all_succeed_when_sent_then_one_call_and_nothing_refused() -> None:
    sqs = FakeSqs()
    messages = _messages(3)

    refused, sleeps = _send(sqs, messages)

    assert refused == []
    assert sleeps.seconds == []
    assert len(sqs.batch_calls) == 1
    assert sqs.batch_calls[0]["QueueUrl"] == QUEUE_URL
    assert sqs.batch_calls[0]["Entries"] == [
        {"Id": "0", "MessageBody": messages[0].body},
        {"Id": "1", "MessageBody": messages[1].body},
        {"Id": "2", "MessageBody": messages[2].body},
    ]


def test_given_no_messages_when_sent_then_sqs_is_not_called() -> None:
    sqs = FakeSqs()

    refused, _ = _send(sqs, [])

    assert refused == []
    assert sqs.batch_calls == []


def test_given_more_than_ten_messages_when_sent_then_each_call_has_at_most_ten_in_order() -> None:
    sqs = FakeSqs()
    messages = _messages(23)

    refused, _ = _send(sqs, messages)

    assert refused == []
    assert [len(batch) for batch in sqs.bodies()] == [10, 10, 3]
    assert [body for batch in sqs.bodies() for body in batch] == [m.body for m in messages]
    assert all(
        [e["Id"] for e in call["Entries"]] == [str(i) for i in range(len(call["Entries"]))]
        for call in sqs.batch_calls
    )


@pytest.mark.parametrize(("delay", "expected"), [(1, 1), (42, 42), (900, 900), (901, 900), (10_000, 900)])
def test_given_a_positive_delay_when_sent_then_delay_seconds_is_clamped_to_sqs_limits(
    delay: int, expected: int
) -> None:
    sqs = FakeSqs()

    _send(sqs, [Outgoing("k", "b", delay_seconds=delay)])

    assert sqs.batch_calls[0]["Entries"][0]["DelaySeconds"] == expected


def test_given_no_delay_when_sent_then_delay_seconds_is_left_out() -> None:
    sqs = FakeSqs()

    _send(sqs, [Outgoing("k", "b", delay_seconds=0), Outgoing("k2", "c")])

    assert all("DelaySeconds" not in entry for entry in sqs.batch_calls[0]["Entries"])


def test_given_a_negative_delay_when_sent_then_delay_seconds_is_left_out_like_zero() -> None:
    sqs = FakeSqs()

    _send(sqs, [Outgoing("k", "b", delay_seconds=-5)])

    assert "DelaySeconds" not in sqs.batch_calls[0]["Entries"][0]


def test_given_attributes_when_sent_then_they_are_passed_unchanged_and_only_when_present() -> None:
    sqs = FakeSqs()
    attributes: SendAttributes = {
        "tenant": {"DataType": "String", "StringValue": "acme"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
    }

    _send(sqs, [Outgoing("k1", "with", attributes), Outgoing("k2", "without"), Outgoing("k3", "empty", {})])

    with_attributes, without, empty = sqs.batch_calls[0]["Entries"]
    assert with_attributes["MessageAttributes"] == attributes
    assert "MessageAttributes" not in without
    assert "MessageAttributes" not in empty


# --- send_batch: retries -----------------------------------------------------------------------


def test_given_some_entries_fail_when_sent_then_only_those_are_retried() -> None:
    messages = _messages(5)
    bodies = [m.body for m in messages]
    sqs = FakeSqs(
        {bodies[1]: ("ServiceUnavailable", False), bodies[3]: ("ThrottlingException", False)},
        {bodies[3]: ("ServiceUnavailable", False)},
    )

    refused, sleeps = _send(sqs, messages, base_delay=0.2)

    assert refused == []
    assert sqs.bodies() == [bodies, [bodies[1], bodies[3]], [bodies[3]]]
    assert [e["Id"] for e in sqs.batch_calls[1]["Entries"]] == ["0", "1"]
    assert len(sleeps.seconds) == 2
    _within_full_jitter(sleeps, 0.2)


def test_given_a_retried_entry_when_resent_then_its_attributes_and_delay_are_kept() -> None:
    attributes = {"tenant": {"DataType": "String", "StringValue": "acme"}}
    message = Outgoing("k", "retry me", attributes, delay_seconds=30)
    sqs = FakeSqs({"retry me": ("InternalError", False)})

    _send(sqs, [message])

    assert sqs.batch_calls[0]["Entries"] == sqs.batch_calls[1]["Entries"]
    assert sqs.batch_calls[1]["Entries"][0]["MessageAttributes"] == attributes
    assert sqs.batch_calls[1]["Entries"][0]["DelaySeconds"] == 30


def test_given_a_sender_fault_when_sent_then_it_is_refused_at_once_without_retry() -> None:
    messages = _messages(3)
    bad = messages[1]
    sqs = FakeSqs({bad.body: ("InvalidMessageContents", True)})

    refused, sleeps = _send(sqs, messages)

    assert len(sqs.batch_calls) == 1
    assert sleeps.seconds == []
    assert refused == [Refused(bad, "InvalidMessageContents", "InvalidMessageContents for 1", True)]


def test_given_a_sender_fault_beside_a_transient_failure_when_sent_then_only_the_transient_is_retried() -> (
    None
):
    messages = _messages(3)
    sqs = FakeSqs(
        {messages[0].body: ("InvalidParameterValue", True), messages[2].body: ("InternalError", False)}
    )

    refused, _ = _send(sqs, messages)

    assert sqs.bodies() == [[m.body for m in messages], [messages[2].body]]
    assert [(r.message, r.code, r.sender_fault) for r in refused] == [
        (messages[0], "InvalidParameterValue", True)
    ]


@pytest.mark.parametrize("attempts", [1, 2, 4, 6])
def test_given_an_entry_that_keeps_failing_when_sent_then_it_is_returned_after_all_attempts(
    attempts: int,
) -> None:
    messages = _messages(3)
    stuck = messages[2]
    sqs = FakeSqs(*[{stuck.body: ("ServiceUnavailable", False)}] * attempts)

    refused, sleeps = _send(sqs, messages, attempts=attempts, base_delay=0.5)

    assert len(sqs.batch_calls) == attempts
    assert sqs.bodies()[1:] == [[stuck.body]] * (attempts - 1)
    assert [(r.message, r.code, r.sender_fault) for r in refused] == [(stuck, "ServiceUnavailable", False)]
    assert len(sleeps.seconds) == attempts - 1
    _within_full_jitter(sleeps, 0.5)


def test_given_a_failure_that_stops_on_the_last_attempt_when_sent_then_nothing_is_refused() -> None:
    message = Outgoing("k", "late")
    sqs = FakeSqs({"late": ("InternalError", False)}, {"late": ("InternalError", False)})

    refused, sleeps = _send(sqs, [message], attempts=3)

    assert refused == []
    assert len(sqs.batch_calls) == 3
    assert len(sleeps.seconds) == 2


def test_given_the_whole_call_raises_when_sent_then_the_whole_chunk_is_retried() -> None:
    messages = _messages(4)
    sqs = FakeSqs(_client_error("ServiceUnavailable"), _client_error("InternalError"))

    refused, sleeps = _send(sqs, messages)

    assert refused == []
    assert sqs.bodies() == [[m.body for m in messages]] * 3
    assert len(sleeps.seconds) == 2


def test_given_the_whole_call_keeps_raising_when_sent_then_every_entry_is_returned_with_the_code() -> None:
    messages = _messages(2)
    sqs = FakeSqs(*[_client_error("ServiceUnavailable")] * 3)

    refused, _ = _send(sqs, messages, attempts=3)

    assert len(sqs.batch_calls) == 3
    assert [(r.message, r.code, r.sender_fault) for r in refused] == [
        (messages[0], "ServiceUnavailable", False),
        (messages[1], "ServiceUnavailable", False),
    ]
    assert "ServiceUnavailable happened" in refused[0].reason


def test_given_a_connection_error_when_sent_then_it_is_retried_and_named_by_its_class() -> None:
    messages = _messages(2)
    sqs = FakeSqs(*[EndpointConnectionError(endpoint_url="https://sqs")] * 2)

    refused, _ = _send(sqs, messages, attempts=2)

    assert len(sqs.batch_calls) == 2
    assert [(r.code, r.sender_fault) for r in refused] == [("EndpointConnectionError", False)] * 2


@pytest.mark.parametrize("code", ["AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"])
def test_given_the_whole_call_fails_for_good_when_sent_then_it_is_not_retried_nor_blamed_on_entries(
    code: str,
) -> None:
    messages = _messages(3)
    sqs = FakeSqs(_client_error(code))

    refused, sleeps = _send(sqs, messages)

    assert len(sqs.batch_calls) == 1
    assert sleeps.seconds == []
    # no entry is at fault, so no caller poisons them for it: they stay where they are
    assert [(r.message, r.code, r.sender_fault, r.retryable) for r in refused] == [
        (m, code, False, False) for m in messages
    ]


@pytest.mark.parametrize(
    "error", [ReadTimeoutError(endpoint_url="https://sqs"), ConnectionClosedError(endpoint_url="https://sqs")]
)
def test_given_a_read_timeout_when_sent_then_the_chunk_is_retried_not_crashed(error: Exception) -> None:
    messages = _messages(2)
    sqs = FakeSqs(error)

    refused, _ = _send(sqs, messages)

    assert refused == []
    assert sqs.bodies() == [[m.body for m in messages]] * 2


def test_given_a_failure_in_the_first_chunk_when_sent_then_it_is_retried_before_the_next_chunk() -> None:
    messages = _messages(12)
    sqs = FakeSqs({messages[4].body: ("InternalError", False)})

    refused, _ = _send(sqs, messages)

    assert refused == []
    assert sqs.bodies() == [
        [m.body for m in messages[:10]],
        [messages[4].body],
        [m.body for m in messages[10:]],
    ]


def test_given_failures_in_two_chunks_when_they_persist_then_both_are_returned_in_order() -> None:
    messages = _messages(15)
    stuck = {messages[2].body: ("InternalError", False), messages[12].body: ("InternalError", False)}
    sqs = FakeSqs(*[stuck] * 4)

    refused, _ = _send(sqs, messages, attempts=2)

    assert [r.message for r in refused] == [messages[2], messages[12]]


# --- send_batch: backoff -----------------------------------------------------------------------


def test_given_retries_when_backing_off_then_full_jitter_draws_between_zero_and_a_capped_doubling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    draws: list[tuple[float, float]] = []

    def top(low: float, high: float) -> float:
        draws.append((low, high))
        return high

    monkeypatch.setattr(random, "uniform", top)  # the module batchsend draws from
    sqs = FakeSqs(*[{"b": ("InternalError", False)}] * 6)

    refused, sleeps = _send(sqs, [Outgoing("k", "b")], attempts=6, base_delay=0.75)

    assert len(refused) == 1
    assert draws == [(0.0, 0.75), (0.0, 1.5), (0.0, 3.0), (0.0, 5.0), (0.0, 5.0)]
    assert sleeps.seconds == [0.75, 1.5, 3.0, 5.0, 5.0]


def test_given_seeded_jitter_when_backing_off_then_every_sleep_is_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(11)
    monkeypatch.setattr(random, "uniform", rng.uniform)  # the module batchsend draws from
    sqs = FakeSqs(*[{"b": ("InternalError", False)}] * 8)

    _, sleeps = _send(sqs, [Outgoing("k", "b")], attempts=8, base_delay=0.3)

    assert len(sleeps.seconds) == 7
    assert len(set(sleeps.seconds)) == 7  # jittered, not constant
    _within_full_jitter(sleeps, 0.3)


@pytest.mark.parametrize("attempts", [0, -1])
def test_given_no_attempts_when_sent_then_messages_are_not_silently_dropped(attempts: int) -> None:
    sqs = FakeSqs()
    messages = _messages(2)

    try:
        refused, _ = _send(sqs, messages, attempts=attempts)
    except ValueError:
        return  # rejecting the argument would be a fine answer too
    assert sqs.batch_calls or [r.message for r in refused] == messages


# --- one bad entry never takes its batch-mates down ---------------------------------------------


class RefusesWholeCalls:
    """An SQS client whose whole SendMessageBatch call fails while any entry's body is ``bad``."""

    def __init__(self, error: Exception, bad: str = "bad") -> None:
        self.error, self.bad = error, bad
        self.calls: list[list[str]] = []
        self.delivered: list[str] = []

    def send_message_batch(self, **kwargs: Any) -> dict[str, Any]:
        bodies = [e["MessageBody"] for e in kwargs["Entries"]]
        self.calls.append(bodies)
        if self.bad in bodies:
            raise self.error
        self.delivered += bodies
        return {"Successful": [{"Id": e["Id"]} for e in kwargs["Entries"]], "Failed": []}


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        (Outgoing("nul", "a\x00b"), "InvalidMessageContents"),
        (Outgoing("no-type", "{}", {"k": {"StringValue": "v"}}), "InvalidParameterValue"),
        (
            Outgoing(
                "eleven", "{}", {f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)}
            ),
            "InvalidParameterValue",
        ),
        (
            Outgoing("empty-value", "{}", {"k": {"DataType": "String", "StringValue": ""}}),
            "InvalidParameterValue",
        ),
        (Outgoing("too-big", "é" * (600 * 1024)), "InvalidParameterValue"),
    ],
    ids=lambda v: v.key if isinstance(v, Outgoing) else v,
)
def test_given_an_entry_sqs_would_refuse_when_sent_then_it_alone_is_refused_before_the_call(
    bad: Outgoing, code: str
) -> None:
    sqs = FakeSqs()
    healthy = _messages(3)
    refused, sleeps = _send(sqs, [healthy[0], bad, *healthy[1:]])
    assert [(r.message.key, r.code, r.sender_fault, r.retryable) for r in refused] == [
        (bad.key, code, True, False)
    ]
    assert [e["MessageBody"] for call in sqs.batch_calls for e in call["Entries"]] == [
        m.body for m in healthy
    ]
    assert sleeps.seconds == []


@pytest.mark.parametrize(
    "error",
    [
        _client_error("InvalidParameterValue"),
        ParamValidationError(
            report='Missing required parameter in Entries[4].MessageAttributes.k: "DataType"'
        ),
        _client_error("AWS.SimpleQueueService.BatchRequestTooLong"),
    ],
    ids=["InvalidParameterValue", "ParamValidationError", "BatchRequestTooLong"],
)
def test_given_a_whole_call_error_one_entry_causes_when_sent_then_the_batch_is_narrowed_to_that_entry(
    error: Exception,
) -> None:
    sqs = RefusesWholeCalls(error)
    messages = _messages(10)
    messages[6] = Outgoing("culprit", "bad")
    refused, _ = _send(sqs, messages)
    assert [(r.message.key, r.sender_fault) for r in refused] == [("culprit", True)]
    assert sorted(sqs.delivered) == sorted(m.body for m in messages if m.key != "culprit")
    assert len(sqs.calls) <= 1 + 2 * 4  # halves: at most two calls per level of a 10-entry batch


def test_given_a_whole_call_error_no_entry_causes_when_sent_then_nothing_is_narrowed_or_blamed() -> None:
    sqs = RefusesWholeCalls(
        _client_error("AWS.SimpleQueueService.NonExistentQueue"), bad="b000".ljust(10, ".")
    )
    refused, _ = _send(sqs, _messages(4))
    assert len(sqs.calls) == 1
    assert {(r.sender_fault, r.retryable) for r in refused} == {(False, False)}
    assert len(refused) == 4


def test_given_a_validation_error_whatever_the_call_carries_when_sent_then_no_entry_is_blamed() -> None:
    # e.g. a malformed queue URL: every half fails alone too, so it is the call's fault
    sqs = FakeSqs(*[_client_error("InvalidParameterValue")] * 20)
    messages = _messages(4)
    refused, sleeps = _send(sqs, messages)
    assert [(r.message, r.sender_fault, r.retryable) for r in refused] == [
        (m, False, False) for m in messages
    ]
    assert sleeps.seconds == []


def test_given_two_culprits_when_sent_then_both_and_only_they_are_blamed() -> None:
    class TwoBad(RefusesWholeCalls):
        def send_message_batch(self, **kwargs: Any) -> dict[str, Any]:
            if any(e["MessageBody"] == "bad2" for e in kwargs["Entries"]):
                self.calls.append([e["MessageBody"] for e in kwargs["Entries"]])
                raise self.error
            return super().send_message_batch(**kwargs)

    sqs = TwoBad(_client_error("InvalidParameterValue"))
    messages = _messages(10)
    messages[2], messages[7] = Outgoing("c1", "bad"), Outgoing("c2", "bad2")
    refused, _ = _send(sqs, messages)
    assert sorted(r.message.key for r in refused if r.sender_fault) == ["c1", "c2"]
    assert len(refused) == 2
    assert len(sqs.delivered) == 8


def test_given_sqs_rules_when_a_bad_entry_is_batched_with_healthy_ones_then_the_healthy_ones_arrive() -> None:
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="batch-mates")["QueueUrl"]
        bad = Outgoing("bad", "{}", {"k": {"StringValue": "no DataType"}})
        refused = send_batch(sqs, url, [Outgoing("a", "{}"), bad, Outgoing("b", "{}")], sleep=Sleeps())
        received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [r.message.key for r in refused] == ["bad"]
    assert "type" in refused[0].reason
    assert len(received) == 2


# --- a due time: the residual delay counted at each call --------------------------------------------


class SteppingClock:
    """A clock that moves ``step`` seconds each time it is read."""

    def __init__(self, start: datetime, step: float) -> None:
        self.now, self.step, self.reads = start, timedelta(seconds=step), 0

    def __call__(self) -> datetime:
        read, self.now, self.reads = self.now, self.now + self.step, self.reads + 1
        return read


NOON = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def test_given_due_messages_in_several_calls_when_sent_then_each_call_counts_its_residual_then() -> None:
    # Given 25 messages due 30 s from now, prepared with that delay, and a machine so slow that each
    # SendMessageBatch call starts 4 s after the previous one
    due = NOON + timedelta(seconds=30)
    messages = [Outgoing(f"k{i}", "b", delay_seconds=30, due=due) for i in range(25)]
    sqs = FakeSqs()

    # When they are sent
    refused, _ = _send(sqs, messages, clock=SteppingClock(NOON, 4.0))

    # Then the three calls ask for what is left at each: none is delivered late by the wait before it
    assert refused == []
    delays = [{e["DelaySeconds"] for e in call["Entries"]} for call in sqs.batch_calls]
    assert delays == [{30}, {26}, {22}]


def test_given_a_due_message_whose_call_fails_when_retried_then_the_retry_asks_for_less() -> None:
    # Given a message due in 10 s and a first call throttled as a whole, the retry 3 s later
    sqs = FakeSqs(_client_error("ThrottlingException"))

    # When it is sent
    refused, _ = _send(
        sqs, [Outgoing("k", "b", delay_seconds=10, due=NOON + timedelta(seconds=10))],
        clock=SteppingClock(NOON, 3.0),
    )  # fmt: skip

    # Then the retry that goes through carries the residual at its own moment, rounded to the nearest
    assert refused == []
    assert [call["Entries"][0]["DelaySeconds"] for call in sqs.batch_calls] == [10, 7]


def test_given_a_due_time_already_past_when_sent_then_delay_seconds_is_left_out() -> None:
    sqs = FakeSqs()

    _send(sqs, [Outgoing("k", "b", delay_seconds=5, due=NOON)], clock=lambda: NOON + timedelta(seconds=9))

    assert "DelaySeconds" not in sqs.batch_calls[0]["Entries"][0]
