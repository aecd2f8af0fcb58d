"""The Scheduler orchestration's pure logic: names, times, grouping, sizing and the fallback."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from sluice.delay.schedule import Parked
from sluice.delay.scheduler import (
    SCHEDULE_INPUT_MAX_BYTES,
    SCHEDULE_LEAD_SECONDS,
    fire_time,
    plan,
    schedule_name,
)
from sluice.delay.settings import DelaySettings
from sluice.errors import ConfigurationError

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
BUCKET = int((NOW + timedelta(hours=3)).timestamp())
WORK = "https://sqs.us-east-1.amazonaws.com/123456789012/work"
OTHER = "https://sqs.us-east-1.amazonaws.com/123456789012/other"
NAME = re.compile(r"^[0-9a-zA-Z._-]{1,64}$")  # CreateSchedule's Name


def parked(key: str, *, target: str = WORK, body: str = "{}", second: int = 0) -> Parked:
    due = datetime.fromtimestamp(BUCKET + second, tz=UTC)
    return Parked(key, target, due, body, {"tenant": {"DataType": "String", "StringValue": "acme"}})


def test_a_schedule_name_is_valid_and_depends_only_on_the_set_of_messages():
    a = schedule_name(BUCKET, WORK, ["m2", "m1"])
    assert NAME.match(a)
    assert a == schedule_name(BUCKET, WORK, ["m1", "m2"])  # order does not matter
    assert a != schedule_name(BUCKET, WORK, ["m1"])
    assert a != schedule_name(BUCKET + 60, WORK, ["m1", "m2"])
    assert a != schedule_name(BUCKET, OTHER, ["m1", "m2"])


def test_a_schedule_fires_its_lead_before_the_bucket_but_never_in_the_past():
    assert fire_time(BUCKET, NOW) == BUCKET - SCHEDULE_LEAD_SECONDS
    soon = datetime.fromtimestamp(BUCKET - 5, tz=UTC)
    assert fire_time(BUCKET, soon) == BUCKET - 4  # the next whole second
    assert fire_time(BUCKET, datetime.fromtimestamp(BUCKET, tz=UTC)) == BUCKET  # never after the bucket


def test_one_message_is_an_sqs_send_message_input_with_its_delay_fixed():
    layout = plan([parked("m1", second=7)], NOW, 60)
    [spec] = layout.schedules
    assert spec.kind == "sqs"
    assert layout.unschedulable == ()
    payload = json.loads(spec.input)
    assert set(payload) == {"QueueUrl", "MessageBody", "DelaySeconds", "MessageAttributes"}
    assert payload["QueueUrl"] == WORK
    assert payload["DelaySeconds"] == SCHEDULE_LEAD_SECONDS + 7
    assert payload["MessageAttributes"]["tenant"]["StringValue"] == "acme"


def test_two_messages_already_go_to_the_rehydrator():
    # never sqs:sendMessageBatch: a batch whose entries failed is a success to the Scheduler
    [spec] = plan([parked("m1"), parked("m2")], NOW, 60).schedules
    assert spec.kind == "lambda"


def test_a_hundred_messages_go_to_the_rehydrator_in_one_schedule():
    layout = plan([parked(f"m{i:03d}") for i in range(100)], NOW, 60)
    [spec] = layout.schedules
    assert spec.kind == "lambda"
    assert len(spec.keys) == 100
    payload = json.loads(spec.input)
    assert payload["scheduled"] == spec.name
    assert len(payload["parked"]["messages"]) == 100


def test_each_target_queue_has_its_own_schedules():
    layout = plan([parked("a", target=WORK), parked("b", target=OTHER)], NOW, 60)
    assert sorted(json.loads(s.input)["QueueUrl"] for s in layout.schedules) == sorted([WORK, OTHER])
    together = plan([parked(k, target=t) for k, t in (("a", WORK), ("b", OTHER), ("c", WORK))], NOW, 60)
    assert sorted(s.keys for s in together.schedules) == [("a", "c"), ("b",)]


def test_inputs_stay_within_the_size_limit_and_what_cannot_fit_falls_back():
    big = "x" * 100_000
    messages = [parked(f"m{i:02d}", body=big) for i in range(12)] + [parked("huge", body="y" * 300_000)]
    layout = plan(messages, NOW, 60)
    assert [p.key for p in layout.unschedulable] == ["huge"]
    assert all(len(s.input.encode()) <= SCHEDULE_INPUT_MAX_BYTES for s in layout.schedules)
    assert sorted(k for s in layout.schedules for k in s.keys) == [f"m{i:02d}" for i in range(12)]
    assert len(layout.schedules) == 6  # two 100 KB bodies per 256 KB input


def test_a_sparse_stream_shares_a_schedule_for_up_to_15_minutes_of_due_times():
    messages = [parked(f"m{i:02d}", second=60 * i) for i in range(15)]  # 1 per 60-s bucket
    first, second = plan(messages, NOW, 60).schedules
    # fired 60 s before the first bucket: due at most 899 s later, i.e. the buckets 0..13 min
    assert first.fire_at == BUCKET - SCHEDULE_LEAD_SECONDS
    assert first.kind == "lambda"
    assert first.keys == tuple(f"m{i:02d}" for i in range(14))
    assert second.kind == "sqs"  # the one left: its own window
    assert second.keys == ("m14",)
    assert json.loads(second.input)["DelaySeconds"] == SCHEDULE_LEAD_SECONDS


def test_a_redelivered_batch_makes_the_same_schedules_even_when_the_window_is_about_to_open():
    messages = [parked(f"m{i:02d}", second=60 * i) for i in range(20)]
    late = datetime.fromtimestamp(BUCKET - 10, tz=UTC)  # redelivered 10 s before the first bucket
    first, again = plan(messages, NOW, 60), plan(messages, late, 60)
    assert [s.name for s in first.schedules] == [s.name for s in again.schedules]
    assert again.schedules[0].fire_at == BUCKET - 9  # later than planned: shorter delays, never longer
    assert all(json.loads(s.input)["DelaySeconds"] <= 900 for s in again.schedules if s.kind == "sqs")


def test_the_same_messages_give_the_same_schedules():
    messages = [parked(f"m{i}", body="z" * 40_000) for i in range(30)]
    first, again = plan(messages, NOW, 60), plan(list(reversed(messages)), NOW, 60)
    assert [s.name for s in first.schedules] == [s.name for s in again.schedules]


BASE = {
    "SLUICE_DELAY_BUCKET": "parked",
    "SLUICE_POISON_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/poison",
    "SLUICE_ENVELOPE_KEY_SECRET": "arn:aws:secretsmanager:us-east-1:123456789012:secret:k",
}


def test_the_state_machine_is_the_default_orchestrator():
    assert DelaySettings.from_env(BASE).delay_orchestrator == "state-machine"


def test_the_scheduler_needs_its_group_role_rehydrator_and_dead_letter_queue():
    with pytest.raises(ConfigurationError, match="SLUICE_DELAY_SCHEDULE_GROUP"):
        DelaySettings.from_env({**BASE, "SLUICE_DELAY_ORCHESTRATOR": "scheduler"})
    with pytest.raises(ConfigurationError, match="SLUICE_DELAY_SCHEDULER_ROLE_ARN"):
        DelaySettings.from_env(
            {**BASE, "SLUICE_DELAY_ORCHESTRATOR": "scheduler", "SLUICE_DELAY_SCHEDULE_GROUP": "g"}
        )
    with pytest.raises(ConfigurationError, match="SLUICE_DELAY_ORCHESTRATOR"):
        DelaySettings.from_env({**BASE, "SLUICE_DELAY_ORCHESTRATOR": "cron"})


# --- 60-second precision: AWS invokes a schedule set at 1:00 between 1:00:00 and 1:00:59 -------------


def test_a_schedule_time_is_a_whole_minute_so_no_firing_within_its_minute_is_early():
    # Given a bucket width that does not divide a minute (buckets open at any second)
    for offset in (1, 17, 59):
        bucket = BUCKET + offset
        # When its window's schedule time is chosen
        at = fire_time(bucket, NOW)
        # Then it is the whole minute at or before the lead, and an SQS target's delay counts from it
        assert at % 60 == 0
        assert bucket - SCHEDULE_LEAD_SECONDS - 59 <= at <= bucket - SCHEDULE_LEAD_SECONDS
        [spec] = plan([Parked("m", WORK, datetime.fromtimestamp(bucket, tz=UTC), "{}", {})], NOW, 7).schedules
        assert spec.kind == "sqs"
        assert spec.fire_at == at
        # fired at any second of its minute, the message is never delivered before it is due
        delay = json.loads(spec.input)["DelaySeconds"]
        assert all(fired + delay >= bucket for fired in range(at, at + 60))


def test_a_window_holds_no_message_a_firing_within_its_minute_could_not_delay_enough():
    # Given a sparse stream whose first bucket opens mid-minute
    start = BUCKET + 30
    dues = [datetime.fromtimestamp(start + 60 * i, tz=UTC) for i in range(16)]
    messages = [Parked(f"m{i:02d}", WORK, due, "{}", {}) for i, due in enumerate(dues)]
    # When they are planned
    for spec in plan(messages, NOW, 7).schedules:
        # Then every message of a window is due at most 899 s after the window's time (SQS's 900 s at most)
        latest = max(start + 60 * int(k[1:]) for k in spec.keys)
        assert latest - spec.fire_at <= 899


def test_a_window_whose_time_has_passed_goes_through_the_rehydrator_even_alone():
    # Given one message parked due 30 s from now (its window's whole minute, less the lead, has passed)
    now = datetime.fromtimestamp(BUCKET - 30, tz=UTC)
    # When it is planned
    [spec] = plan([parked("m1")], now, 60).schedules
    # Then the Lambda target carries it (its residual delay is counted when it runs, never early)
    assert spec.kind == "lambda"
    assert spec.fire_at == BUCKET - 29
