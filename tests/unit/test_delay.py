"""Long delays (sluice.delay): buckets, due-time bounds, settings, parked objects and the producer."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from sluice.batchsend import residual_seconds
from sluice.delay.schedule import (
    MAX_DELAY,
    OBJECT_VERSION,
    Parked,
    bucket_of,
    bucket_prefix,
    check_target,
    decode_object,
    due_time,
    encode_object,
    execution_input,
    execution_name,
    send_delayed,
)
from sluice.delay.settings import DelaySettings
from sluice.envelope import ATTRIBUTE, Envelope, SendAttributes, decode, merge
from sluice.errors import ConfigurationError, PermanentError
from sluice.limits import MAX_DELAY_SECONDS
from tests.conftest import ENVELOPE_KEY_ARN
from tests.doubles import FakeSqs

NOW = datetime(2024, 6, 1, 12, 30, 15, 250_000, tzinfo=UTC)
BOUNDARY = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)  # 1717243200: a multiple of 60, 300, 900 and 3600
DELAY_QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/delay"
TARGET = "https://sqs.us-east-1.amazonaws.com/123456789012/work"
OTHER = "https://sqs.us-east-1.amazonaws.com/123456789012/other"
POISON_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/poison"
REQUIRED = {
    "SLUICE_DELAY_BUCKET": "sluice-delays",
    "SLUICE_POISON_QUEUE_URL": POISON_URL,
    "SLUICE_ENVELOPE_KEY_SECRET": ENVELOPE_KEY_ARN,
}


def _settings(**overrides: str) -> DelaySettings:
    return DelaySettings.from_env({**REQUIRED, **overrides})


def _epoch(when: datetime) -> int:
    return int(when.timestamp())


# --- buckets -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("width", "expected"),
    [
        (1, BOUNDARY + timedelta(seconds=1_234)),
        (60, BOUNDARY + timedelta(seconds=1_200)),
        (90, BOUNDARY + timedelta(seconds=1_170)),
        (300, BOUNDARY + timedelta(seconds=1_200)),
        (450, BOUNDARY + timedelta(seconds=900)),
    ],
)
def test_given_a_due_time_when_bucketed_then_it_is_floored_to_the_bucket_width(
    width: int, expected: datetime
) -> None:
    due = BOUNDARY + timedelta(seconds=1_234, microseconds=999_999)

    assert bucket_of(due, width) == _epoch(expected)


@pytest.mark.parametrize("width", [1, 60, 300, 450])
def test_given_a_due_time_exactly_on_a_boundary_when_bucketed_then_it_opens_its_own_bucket(
    width: int,
) -> None:
    assert bucket_of(BOUNDARY, width) == _epoch(BOUNDARY)
    assert bucket_of(BOUNDARY - timedelta(microseconds=1), width) == _epoch(BOUNDARY) - width


def test_given_the_same_instant_in_another_time_zone_when_bucketed_then_the_bucket_is_the_same() -> None:
    local = NOW.astimezone(timezone(timedelta(hours=-7)))

    assert bucket_of(local, 60) == bucket_of(NOW, 60)


def test_given_random_due_times_when_bucketed_then_the_bucket_is_at_most_due_and_within_one_width() -> None:
    rng = random.Random(20240601)
    for _ in range(2_000):
        width = rng.randint(1, MAX_DELAY_SECONDS // 2)
        due = NOW + timedelta(microseconds=rng.randint(0, 365 * 86_400 * 10**6))
        opens = datetime.fromtimestamp(bucket_of(due, width), tz=UTC)

        assert bucket_of(due, width) % width == 0
        assert opens <= due, (due, width)
        assert opens > due - timedelta(seconds=width), (due, width)


@pytest.mark.parametrize("width", [1, 7, 60, 450])
def test_given_increasing_due_times_when_bucketed_then_the_buckets_never_decrease(width: int) -> None:
    rng = random.Random(width)
    dues = sorted(NOW + timedelta(microseconds=rng.randint(0, 3_600 * 10**6)) for _ in range(500))

    buckets = [bucket_of(due, width) for due in dues]

    assert buckets == sorted(buckets)


def test_given_random_routes_when_a_due_time_is_parked_then_its_bucket_opens_after_half_the_threshold() -> (
    None
):
    # The design's safety rule: a message is parked only when due - now > threshold, and with a bucket
    # width of at most half the threshold its bucket cannot open while writers may still add to it.
    rng = random.Random(902)
    checked = 0
    while checked < 5_000:
        threshold = rng.randint(2, MAX_DELAY_SECONDS)
        width = rng.randint(1, threshold // 2)
        now = NOW + timedelta(microseconds=rng.randint(0, 86_400 * 10**6))
        due = now + timedelta(microseconds=rng.randint(0, 2 * threshold * 10**6))
        if due - now <= timedelta(seconds=threshold):
            continue  # sent directly, never parked
        opens = datetime.fromtimestamp(bucket_of(due, width), tz=UTC)

        assert opens - now > timedelta(seconds=threshold / 2), (now, due, width, threshold)
        checked += 1


def test_given_the_tightest_case_when_parked_then_the_bucket_still_opens_after_half_the_threshold() -> None:
    # due just past now + threshold, and just before a boundary so the floor loses almost a whole width
    threshold, width = 900, 450
    due = BOUNDARY + timedelta(seconds=width, microseconds=-1)
    now = due - timedelta(seconds=threshold, microseconds=1)

    opens = datetime.fromtimestamp(bucket_of(due, width), tz=UTC)

    assert due - now > timedelta(seconds=threshold)
    assert opens == BOUNDARY
    assert opens - now == timedelta(seconds=threshold / 2, microseconds=2)


# --- residual delay ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ahead", "expected"),
    [
        (timedelta(seconds=10), 10),
        (timedelta(seconds=10, microseconds=1), 10),  # nearest second: within ±0.5 s of due
        (timedelta(seconds=10, microseconds=499_999), 10),
        (timedelta(seconds=10, microseconds=500_000), 11),
        (timedelta(microseconds=1), 0),
        (timedelta(seconds=899, microseconds=500_000), 900),
        (timedelta(seconds=900), 900),
        (timedelta(seconds=900, microseconds=1), 900),
        (timedelta(days=30), 900),
        (timedelta(0), 0),
        (timedelta(microseconds=-1), 0),
        (timedelta(hours=-2), 0),
    ],
)
def test_given_a_due_time_when_computing_the_residual_then_it_is_whole_seconds_within_sqs_limits(
    ahead: timedelta, expected: int
) -> None:
    residual = residual_seconds(NOW + ahead, NOW)

    assert isinstance(residual, int)
    assert residual == expected


# --- due-time bounds ---------------------------------------------------------------------------


def test_given_no_deliver_at_when_validated_then_it_is_permanent() -> None:
    with pytest.raises(PermanentError, match="no deliver_at"):
        due_time(Envelope(target=TARGET), now=NOW, grace_seconds=300)


def test_given_a_naive_deliver_at_when_validated_then_it_is_permanent() -> None:
    naive = (NOW + timedelta(hours=1)).replace(tzinfo=None)

    with pytest.raises(PermanentError, match="no time zone"):
        due_time(Envelope(deliver_at=naive), now=NOW, grace_seconds=300)


def test_given_a_deliver_at_beyond_a_year_when_validated_then_it_is_permanent_with_the_reason() -> None:
    due = NOW + MAX_DELAY + timedelta(seconds=1)

    with pytest.raises(PermanentError, match="more than 365 days away") as raised:
        due_time(Envelope(deliver_at=due), now=NOW, grace_seconds=300)

    assert due.isoformat() in str(raised.value)


@pytest.mark.parametrize(
    "ahead", [timedelta(days=365), timedelta(days=365, microseconds=-1), timedelta(days=1), timedelta(0)]
)
def test_given_a_deliver_at_within_a_year_when_validated_then_it_is_returned(ahead: timedelta) -> None:
    due = NOW + ahead

    assert due_time(Envelope(deliver_at=due), now=NOW, grace_seconds=300) == due


def test_given_a_deliver_at_past_the_grace_when_validated_then_it_is_permanent() -> None:
    due = NOW - timedelta(seconds=300, microseconds=1)

    with pytest.raises(PermanentError, match="more than 300s in the past"):
        due_time(Envelope(deliver_at=due), now=NOW, grace_seconds=300)


@pytest.mark.parametrize("behind", [timedelta(seconds=300), timedelta(seconds=1), timedelta(microseconds=1)])
def test_given_a_deliver_at_within_the_grace_when_validated_then_it_is_returned(behind: timedelta) -> None:
    due = NOW - behind

    assert due_time(Envelope(deliver_at=due), now=NOW, grace_seconds=300) == due


def test_given_a_zero_grace_when_a_deliver_at_is_just_past_then_it_is_permanent() -> None:
    with pytest.raises(PermanentError, match="in the past"):
        due_time(Envelope(deliver_at=NOW - timedelta(microseconds=1)), now=NOW, grace_seconds=0)


def test_given_a_deliver_at_in_another_time_zone_when_validated_then_the_instant_counts() -> None:
    due = (NOW + timedelta(days=365)).astimezone(timezone(timedelta(hours=14)))

    assert due_time(Envelope(deliver_at=due), now=NOW, grace_seconds=300) == due


# --- targets -----------------------------------------------------------------------------------


def test_given_a_target_outside_the_allowlist_when_checked_then_the_error_names_it() -> None:
    with pytest.raises(PermanentError, match="not in the allowlist") as raised:
        check_target(OTHER, [TARGET])

    assert OTHER in str(raised.value)


@pytest.mark.parametrize("target", [None, ""])
def test_given_no_target_when_checked_then_it_is_permanent(target: str | None) -> None:
    with pytest.raises(PermanentError, match="no target"):
        check_target(target, [TARGET])


def test_given_an_empty_allowlist_when_checked_then_every_target_is_refused() -> None:
    with pytest.raises(PermanentError, match="not in the allowlist"):
        check_target(TARGET, ())


def test_given_an_allowed_target_when_checked_then_it_is_returned() -> None:
    assert check_target(TARGET, (OTHER, TARGET)) == TARGET
    assert check_target(TARGET, iter([TARGET])) == TARGET


def test_given_a_target_that_only_prefixes_an_allowed_one_when_checked_then_it_is_refused() -> None:
    with pytest.raises(PermanentError):
        check_target(TARGET[:-1], [TARGET])


# --- settings ----------------------------------------------------------------------------------


def test_given_only_required_variables_when_read_then_the_delay_defaults_apply() -> None:
    settings = _settings()

    assert settings.delay_bucket == "sluice-delays"
    assert settings.poison_queue_url == POISON_URL
    assert settings.delay_prefix == "delayed/"
    assert settings.delay_state_machine_arn == ""
    assert settings.delay_targets == ()
    assert settings.direct_send_threshold_seconds == 900
    assert settings.delay_bucket_seconds == 60
    assert settings.past_grace_seconds == 300


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (TARGET, (TARGET,)),
        (f"{TARGET},{OTHER}", (TARGET, OTHER)),
        (f" {TARGET} ,, {OTHER} ,", (TARGET, OTHER)),
        ("", ()),
    ],
)
def test_given_csv_targets_when_read_then_they_become_a_tuple(raw: str, expected: tuple[str, ...]) -> None:
    assert _settings(SLUICE_DELAY_TARGETS=raw).delay_targets == expected


def test_given_string_values_when_read_then_they_are_converted_to_their_types() -> None:
    settings = _settings(
        SLUICE_DIRECT_SEND_THRESHOLD_SECONDS="600",
        SLUICE_DELAY_BUCKET_SECONDS="300",
        SLUICE_PAST_GRACE_SECONDS="0",
        SLUICE_DELAY_PREFIX="parked/delays/",
    )

    assert settings.direct_send_threshold_seconds == 600
    assert settings.delay_bucket_seconds == 300
    assert settings.past_grace_seconds == 0
    assert settings.delay_prefix == "parked/delays/"


@pytest.mark.parametrize(("threshold", "width"), [("100", "51"), ("900", "451"), ("2", "2")])
def test_given_a_bucket_wider_than_half_the_threshold_when_read_then_the_error_names_the_variable(
    threshold: str, width: str
) -> None:
    with pytest.raises(ConfigurationError, match="SLUICE_DELAY_BUCKET_SECONDS"):
        _settings(SLUICE_DIRECT_SEND_THRESHOLD_SECONDS=threshold, SLUICE_DELAY_BUCKET_SECONDS=width)


@pytest.mark.parametrize(("threshold", "width"), [("100", "50"), ("900", "450"), ("2", "1")])
def test_given_a_bucket_of_exactly_half_the_threshold_when_read_then_it_is_accepted(
    threshold: str, width: str
) -> None:
    settings = _settings(SLUICE_DIRECT_SEND_THRESHOLD_SECONDS=threshold, SLUICE_DELAY_BUCKET_SECONDS=width)

    assert settings.delay_bucket_seconds * 2 == settings.direct_send_threshold_seconds


@pytest.mark.parametrize("threshold", ["901", "3600", "0"])
def test_given_a_threshold_outside_sqs_limits_when_read_then_the_error_names_the_variable(
    threshold: str,
) -> None:
    with pytest.raises(ConfigurationError, match="SLUICE_DIRECT_SEND_THRESHOLD_SECONDS"):
        _settings(SLUICE_DIRECT_SEND_THRESHOLD_SECONDS=threshold, SLUICE_DELAY_BUCKET_SECONDS="1")


@pytest.mark.parametrize("prefix", ["delayed", "/delayed/", ""])
def test_given_a_bad_prefix_when_read_then_the_error_names_the_variable(prefix: str) -> None:
    with pytest.raises(ConfigurationError, match="SLUICE_DELAY_PREFIX"):
        _settings(SLUICE_DELAY_PREFIX=prefix)


def test_given_no_delay_bucket_when_read_then_the_error_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="SLUICE_DELAY_BUCKET"):
        DelaySettings.from_env({"SLUICE_POISON_QUEUE_URL": POISON_URL})


@pytest.mark.parametrize("url", ["poison", "arn:aws:sqs:us-east-1:123456789012:poison"])
def test_given_a_bad_poison_queue_url_when_read_then_the_error_names_the_variable(url: str) -> None:
    with pytest.raises(ConfigurationError, match="SLUICE_POISON_QUEUE_URL"):
        _settings(SLUICE_POISON_QUEUE_URL=url)


def test_given_no_variables_when_read_then_every_required_variable_is_named() -> None:
    with pytest.raises(ConfigurationError) as raised:
        DelaySettings.from_env({})

    assert "SLUICE_DELAY_BUCKET" in str(raised.value)
    assert "SLUICE_POISON_QUEUE_URL" in str(raised.value)


# --- state machine executions ------------------------------------------------------------------


def test_given_two_due_times_in_one_bucket_when_named_then_name_and_input_are_identical_bytes() -> None:
    first = bucket_of(BOUNDARY + timedelta(seconds=1), 60)
    second = bucket_of(BOUNDARY + timedelta(seconds=59, microseconds=999_999), 60)

    assert first == second
    assert execution_name(first) == execution_name(second)
    assert execution_input("delayed/", first).encode() == execution_input("delayed/", second).encode()


def test_given_different_buckets_when_named_then_the_names_differ() -> None:
    assert execution_name(_epoch(BOUNDARY)) != execution_name(_epoch(BOUNDARY) + 60)


def test_given_a_bucket_when_named_then_the_name_is_a_valid_step_functions_name() -> None:
    name = execution_name(_epoch(NOW + MAX_DELAY))

    assert re.fullmatch(r"[A-Za-z0-9_-]{1,80}", name)
    assert str(_epoch(NOW + MAX_DELAY)) in name


def test_given_a_bucket_when_the_input_is_built_then_it_names_the_bucket_prefix_and_wake_time() -> None:
    bucket = bucket_of(NOW, 60)

    document = json.loads(execution_input("delayed/", bucket))

    assert document == {
        "bucket": bucket,
        "prefix": f"delayed/{bucket}/",
        "wake_at": "2024-06-01T12:30:00Z",
    }
    assert bucket_prefix("delayed/", bucket) == document["prefix"]
    assert datetime.fromisoformat(document["wake_at"]) == datetime.fromtimestamp(bucket, tz=UTC)


def test_given_random_buckets_when_the_input_is_built_then_wake_at_is_the_bucket_start_in_utc() -> None:
    rng = random.Random(7)
    for _ in range(200):
        bucket = bucket_of(NOW + timedelta(seconds=rng.randint(0, 365 * 86_400)), rng.choice([1, 60, 450]))

        wake_at = json.loads(execution_input("p/", bucket))["wake_at"]

        assert wake_at.endswith("Z")
        assert datetime.fromisoformat(wake_at) == datetime.fromtimestamp(bucket, tz=UTC)
        assert execution_input("p/", bucket) == execution_input("p/", bucket)


# --- parked objects ----------------------------------------------------------------------------


def _parked(key: str = "m-1", due: datetime = NOW + timedelta(hours=2), body: str = "{}") -> Parked:
    user: SendAttributes = {
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff\x80raw"},
        "amount": {"DataType": "Number", "StringValue": "12.50"},
        "tenant": {"DataType": "String", "StringValue": "acme ✓"},
    }
    envelope = Envelope(origin_id=key, deliver_at=due, target=TARGET)
    return Parked(key, TARGET, due, body, merge(user, envelope, body="", seal=None))


def test_given_parked_messages_when_encoded_and_decoded_then_everything_but_binary_form_round_trips() -> None:
    messages = [_parked("m-1", body="héllo → 世界 🎉"), _parked("m-2", due=NOW + timedelta(days=200))]

    decoded = decode_object(encode_object(1_717_250_000, messages))

    assert [(p.key, p.target, p.due, p.body) for p in decoded] == [
        (p.key, p.target, p.due, p.body) for p in messages
    ]
    for original, again in zip(messages, decoded, strict=True):
        assert again.due.tzinfo is not None
        assert again.attributes["amount"] == original.attributes["amount"]
        assert again.attributes["tenant"] == original.attributes["tenant"]
        assert again.attributes[ATTRIBUTE] == original.attributes[ATTRIBUTE]


def test_given_a_binary_attribute_when_parked_and_sent_then_its_bytes_survive() -> None:
    original = _parked(body="unicode ✓ body")

    (again,) = decode_object(encode_object(1, [original]))
    outgoing = again.outgoing(NOW)

    assert outgoing.attributes == original.attributes
    assert outgoing.attributes["blob"]["BinaryValue"] == b"\x00\xff\x80raw"
    assert outgoing.body == "unicode ✓ body"
    assert outgoing.key == "m-1"


def test_given_a_parked_object_when_encoded_then_it_is_compact_versioned_json() -> None:
    data = encode_object(1_717_250_000, [_parked()])

    document = json.loads(data)
    assert document["v"] == OBJECT_VERSION
    assert document["bucket"] == 1_717_250_000
    assert data == json.dumps(document, separators=(",", ":")).encode()


def test_given_a_decoded_object_when_encoded_again_then_the_bytes_are_identical() -> None:
    data = encode_object(5, [_parked("m-1"), _parked("m-2")])

    assert encode_object(5, decode_object(data)) == data


def test_given_parked_messages_when_encoded_then_the_originals_are_not_mutated() -> None:
    original = _parked()

    encode_object(1, [original])

    assert original.attributes["blob"]["BinaryValue"] == b"\x00\xff\x80raw"


def test_given_no_messages_when_encoded_and_decoded_then_the_list_is_empty() -> None:
    assert decode_object(encode_object(1, [])) == []


@pytest.mark.parametrize("version", [0, 2, "1", None])
def test_given_an_unknown_object_version_when_decoded_then_it_is_a_value_error(version: object) -> None:
    data = json.dumps({"v": version, "bucket": 1, "messages": []}).encode()

    with pytest.raises(ValueError, match="unknown parked-object version"):
        decode_object(data)


def test_given_an_object_without_version_when_decoded_then_it_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown parked-object version"):
        decode_object(b'{"bucket": 1, "messages": []}')


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (NOW, 900),
        (NOW + timedelta(hours=2) - timedelta(seconds=42, microseconds=500_000), 43),
        (NOW + timedelta(hours=2), 0),
        (NOW + timedelta(hours=3), 0),
    ],
)
def test_given_a_parked_message_when_made_outgoing_then_it_carries_the_residual_delay(
    now: datetime, expected: int
) -> None:
    (parked,) = decode_object(encode_object(1, [_parked(due=NOW + timedelta(hours=2))]))

    assert parked.outgoing(now).delay_seconds == expected


# --- producer ----------------------------------------------------------------------------------


def _envelope_of(sent: dict[str, Any]) -> Envelope:
    envelope, problem = decode(sent["MessageAttributes"][ATTRIBUTE]["StringValue"])
    assert problem is None
    assert envelope is not None
    return envelope


@pytest.mark.parametrize(
    "when", [{}, {"deliver_at": NOW + timedelta(hours=1), "delay_seconds": 3_600}], ids=["none", "both"]
)
def test_given_not_exactly_one_due_time_when_sending_delayed_then_it_is_a_value_error(
    when: dict[str, Any],
) -> None:
    sqs = FakeSqs()

    with pytest.raises(ValueError, match="exactly one of deliver_at or delay_seconds"):
        send_delayed(sqs, delay_queue_url=DELAY_QUEUE, target=TARGET, body="{}", **when)  # type: ignore[arg-type]

    assert sqs.sent == []


def test_given_a_naive_deliver_at_when_sending_delayed_then_it_is_a_value_error() -> None:
    sqs = FakeSqs()

    with pytest.raises(ValueError, match="timezone-aware"):
        send_delayed(
            sqs,  # type: ignore[arg-type]
            delay_queue_url=DELAY_QUEUE,
            target=TARGET,
            body="{}",
            deliver_at=datetime(2024, 6, 2, 12, 0),  # naive on purpose
        )

    assert sqs.sent == []


def test_given_a_deliver_at_when_sending_delayed_then_one_envelope_carries_due_time_and_target() -> None:
    sqs = FakeSqs()
    due = NOW + timedelta(days=30)
    user: SendAttributes = {
        "tenant": {"DataType": "String", "StringValue": "acme"},
        "amount": {"DataType": "Number", "StringValue": "12.50"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
    }

    message_id = send_delayed(
        sqs,  # type: ignore[arg-type]
        delay_queue_url=DELAY_QUEUE,
        target=TARGET,
        body='{"order_id": 1}',
        deliver_at=due,
        attributes=user,
    )

    assert message_id == "m-1"
    (sent,) = sqs.sent
    assert sent["QueueUrl"] == DELAY_QUEUE
    assert sent["MessageBody"] == '{"order_id": 1}'
    assert {k: v for k, v in sent["MessageAttributes"].items() if k != ATTRIBUTE} == user
    assert list(sent["MessageAttributes"]).count(ATTRIBUTE) == 1
    envelope = _envelope_of(sent)
    assert envelope.deliver_at == due
    assert envelope.target == TARGET


def test_given_delay_seconds_when_sending_delayed_then_the_due_time_is_now_plus_the_delay() -> None:
    sqs = FakeSqs()

    send_delayed(
        sqs,  # type: ignore[arg-type]
        delay_queue_url=DELAY_QUEUE,
        target=TARGET,
        body="x",
        delay_seconds=90.5,
        now=lambda: NOW,
    )

    envelope = _envelope_of(sqs.sent[0])
    assert envelope.deliver_at == NOW + timedelta(seconds=90.5)
    assert envelope.target == TARGET
    assert set(sqs.sent[0]["MessageAttributes"]) == {ATTRIBUTE}


def test_given_a_naive_clock_when_sending_with_delay_seconds_then_it_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        send_delayed(
            FakeSqs(),  # type: ignore[arg-type]
            delay_queue_url=DELAY_QUEUE,
            target=TARGET,
            body="x",
            delay_seconds=10,
            now=lambda: NOW.replace(tzinfo=None),
        )


def test_given_an_existing_envelope_when_sending_delayed_then_it_is_updated_not_duplicated() -> None:
    sqs = FakeSqs()
    old_due = NOW + timedelta(hours=1)
    existing = merge(
        {"tenant": {"DataType": "String", "StringValue": "acme"}},
        Envelope(origin_id="first-hop", attempts=2, deliver_at=old_due, target=OTHER, trace="Root=1-a"),
        body="",
        seal=None,
    )
    due = NOW + timedelta(days=2)

    send_delayed(
        sqs,  # type: ignore[arg-type]
        delay_queue_url=DELAY_QUEUE,
        target=TARGET,
        body="x",
        deliver_at=due,
        attributes=existing,
        keep_identity=True,  # a re-send of the same message (redrive, replay)
    )

    attributes = sqs.sent[0]["MessageAttributes"]
    assert set(attributes) == {"tenant", ATTRIBUTE}
    assert attributes["tenant"] == existing["tenant"]
    envelope = _envelope_of(sqs.sent[0])
    assert envelope.deliver_at == due
    assert envelope.target == TARGET
    assert envelope.origin_id == "first-hop"
    assert envelope.attempts == 2
    assert envelope.trace == "Root=1-a"


def test_given_the_envelope_of_the_message_being_handled_when_sending_delayed_then_it_is_a_new_message() -> (
    None
):
    # A follow-up written from a handler must not inherit the handled message's identity: it would
    # share its idempotency key and be skipped as a duplicate (or poisoned as a reused key).
    sqs = FakeSqs()
    handled = merge({}, Envelope(origin_id="first-hop", attempts=2, trace="Root=1-a"), body="", seal=None)

    send_delayed(
        sqs,  # type: ignore[arg-type]
        delay_queue_url=DELAY_QUEUE,
        target=TARGET,
        body="follow-up",
        deliver_at=NOW + timedelta(hours=1),
        attributes=handled,
    )

    envelope = _envelope_of(sqs.sent[0])
    assert envelope.origin_id is None
    assert envelope.attempts == 0
    assert envelope.trace == "Root=1-a"  # the trace still links the two


def test_given_attributes_when_sending_delayed_then_the_callers_mapping_is_not_mutated() -> None:
    user = {"tenant": {"DataType": "String", "StringValue": "acme"}}

    send_delayed(
        FakeSqs(),  # type: ignore[arg-type]
        delay_queue_url=DELAY_QUEUE,
        target=TARGET,
        body="x",
        deliver_at=NOW,
        attributes=user,
    )

    assert user == {"tenant": {"DataType": "String", "StringValue": "acme"}}


def test_given_an_allowlist_of_arns_when_a_url_names_that_queue_then_it_is_allowed() -> None:
    allowlist = ("arn:aws:sqs:eu-west-1:210987654321:billing", TARGET)
    url = "https://sqs.eu-west-1.amazonaws.com/210987654321/billing"

    assert check_target(url, allowlist) == url


def test_given_a_target_that_is_not_a_queue_url_when_checked_then_it_is_rejected() -> None:
    with pytest.raises(PermanentError, match="not a queue URL"):
        check_target(
            "arn:aws:sqs:eu-west-1:210987654321:billing", ("arn:aws:sqs:eu-west-1:210987654321:billing",)
        )


def test_given_the_same_queue_name_in_another_account_when_checked_then_it_is_rejected() -> None:
    with pytest.raises(PermanentError, match="not in the allowlist"):
        check_target(
            "https://sqs.eu-west-1.amazonaws.com/999999999999/billing",
            ("arn:aws:sqs:eu-west-1:210987654321:billing",),
        )


def test_given_the_same_queue_in_another_region_when_checked_then_it_is_rejected() -> None:
    with pytest.raises(PermanentError, match="not in the allowlist"):
        check_target(
            "https://sqs.us-east-1.amazonaws.com/210987654321/billing",
            ("arn:aws:sqs:eu-west-1:210987654321:billing",),
        )


def test_given_a_local_endpoint_url_when_checked_then_the_region_is_not_required() -> None:
    url = "http://127.0.0.1:4566/210987654321/billing"

    assert check_target(url, ("arn:aws:sqs:eu-west-1:210987654321:billing",)) == url
