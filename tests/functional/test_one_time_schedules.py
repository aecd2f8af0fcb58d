"""The local runtime's one-time schedules (sluice_local.emulation.one_time) against in-process moto:
fired once when due, deleted after, retried then dead-lettered; CreateSchedule held to AWS's rules."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sluice_local.emulation.one_time import LOCAL_RETRIES, OneTimeSchedules, due_at
from tests.waiting import wait_for

REGION, ACCOUNT, GROUP = "us-east-1", "123456789012", "g-delays"
NOW = datetime(2026, 11, 28, 12, 0, 0, tzinfo=UTC)
ROLE = f"arn:aws:iam::{ACCOUNT}:role/scheduler"
DLQ = f"arn:aws:sqs:{REGION}:{ACCOUNT}:schedule-dlq"


class FakeDeliveries:
    """Answers each target call with the next scripted outcome (None: delivered)."""

    def __init__(self, outcomes: list[str | None]) -> None:
        self.outcomes = outcomes
        self.calls: list[dict[str, Any]] = []
        self.dead: list[tuple[str, str, str, dict[str, str]]] = []
        self._lock = threading.Lock()

    def schedule_call(self, target: dict[str, Any]) -> str | None:
        with self._lock:
            self.calls.append(target)
            return self.outcomes.pop(0) if self.outcomes else None

    def dead_letter(self, queue_arn: str, role: str, body: str, attributes: dict[str, str]) -> str | None:
        self.dead.append((queue_arn, role, body, attributes))
        return None


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def scheduler():
    with mock_aws():
        yield boto3.client("scheduler", region_name=REGION)


def runtime(deliveries: FakeDeliveries, clock: Clock) -> OneTimeSchedules:
    schedules = OneTimeSchedules(deliveries, REGION, ACCOUNT, clock)  # type: ignore[arg-type]
    schedules.add_group(GROUP)
    return schedules


def create(client: Any, name: str, at: datetime, *, after: str = "DELETE", payload: str = '{"n": 1}') -> None:
    client.create_schedule(
        Name=name, GroupName=GROUP, ScheduleExpression=f"at({at:%Y-%m-%dT%H:%M:%S})",
        FlexibleTimeWindow={"Mode": "OFF"}, ActionAfterCompletion=after,
        Target={"Arn": "arn:aws:scheduler:::aws-sdk:sqs:sendMessage", "RoleArn": ROLE, "Input": payload,
                "DeadLetterConfig": {"Arn": DLQ}},
    )  # fmt: skip


def names(client: Any) -> list[str]:
    return sorted(s["Name"] for s in client.list_schedules(GroupName=GROUP)["Schedules"])


def test_a_due_schedule_fires_once_and_is_deleted_and_a_later_one_waits(scheduler):
    deliveries, clock = FakeDeliveries([]), Clock()
    schedules = runtime(deliveries, clock)
    create(scheduler, "due", NOW)
    create(scheduler, "later", NOW + timedelta(minutes=5))
    create(scheduler, "kept", NOW, after="NONE")
    schedules.tick()
    wait_for(lambda: names(scheduler) == ["kept", "later"], "the due DELETE schedule deleted", 10)
    wait_for(lambda: schedules.fired == 2, "both due schedules fired", 10)
    schedules.tick()  # a kept schedule fires once only
    assert len(deliveries.calls) == 2
    clock.now = NOW + timedelta(minutes=5)
    schedules.tick()
    wait_for(lambda: names(scheduler) == ["kept"], "the later schedule fired and deleted", 10)
    assert [json.loads(c["Input"]) for c in deliveries.calls] == [{"n": 1}] * 3


def test_a_target_that_keeps_failing_is_retried_then_dead_lettered(scheduler):
    deliveries = FakeDeliveries(["AccessDeniedException: no"] * LOCAL_RETRIES)
    schedules = runtime(deliveries, Clock())
    create(scheduler, "refused", NOW, payload='{"QueueUrl": "q", "MessageBody": "b"}')
    schedules.tick()
    wait_for(lambda: deliveries.dead, "the input dead-lettered", 15)
    [(queue, role, body, attributes)] = deliveries.dead
    assert (queue, role, json.loads(body)) == (DLQ, ROLE, {"QueueUrl": "q", "MessageBody": "b"})
    assert attributes["ERROR_CODE"] == "AccessDeniedException"
    assert attributes["SCHEDULE_ARN"].endswith(f"schedule/{GROUP}/refused")
    assert attributes["RETRY_ATTEMPTS"] == str(LOCAL_RETRIES - 1)
    assert len(deliveries.calls) == LOCAL_RETRIES
    wait_for(lambda: names(scheduler) == [], "the completed schedule deleted", 10)


def test_a_target_that_recovers_is_not_dead_lettered(scheduler):
    deliveries = FakeDeliveries(["ThrottlingException: slow down"])
    schedules = runtime(deliveries, Clock())
    create(scheduler, "flaky", NOW)
    schedules.tick()
    wait_for(lambda: names(scheduler) == [], "delivered on its retry and deleted", 15)
    assert len(deliveries.calls) == 2
    assert deliveries.dead == []


@pytest.mark.parametrize(
    ("name", "payload", "expression", "why"),
    [
        ("bad name", "{}", "at(2026-11-28T12:00:00)", "Name"),
        ("big", json.dumps({"x": "y" * 270_000}), "at(2026-11-28T12:00:00)", "Input"),
        ("when", "{}", "at(2026-11-28 12:00)", "Schedule Expression"),
    ],
    ids=["name", "input-size", "expression"],
)
def test_create_schedule_refuses_what_aws_refuses(scheduler, name, payload, expression, why):
    runtime(FakeDeliveries([]), Clock())  # installs the rules
    with pytest.raises(scheduler.exceptions.ValidationException, match=why):
        scheduler.create_schedule(
            Name=name, GroupName=GROUP, ScheduleExpression=expression, FlexibleTimeWindow={"Mode": "OFF"},
            Target={"Arn": "arn:aws:scheduler:::aws-sdk:sqs:sendMessage", "RoleArn": ROLE, "Input": payload},
        )  # fmt: skip


def test_an_at_time_is_read_in_its_time_zone():
    class Stored:
        schedule_expression = "at(2026-11-28T13:00:00)"
        schedule_expression_timezone = "Europe/Paris"

    assert due_at(Stored()) == NOW  # 13:00 in Paris is 12:00 UTC in November
    Stored.schedule_expression = "rate(5 minutes)"
    assert due_at(Stored()) is None


def test_a_schedule_created_again_under_a_fired_name_fires_again(scheduler):
    # Given a schedule that fired and was deleted (ActionAfterCompletion DELETE)
    deliveries, clock = FakeDeliveries([]), Clock()
    schedules = runtime(deliveries, clock)
    create(scheduler, "same", NOW)
    schedules.tick()
    wait_for(lambda: names(scheduler) == [], "the first one fired and deleted", 10)
    # When a new schedule is created under the freed name (AWS: a new schedule)
    create(scheduler, "same", NOW)
    schedules.tick()
    # Then it fires too
    wait_for(lambda: names(scheduler) == [], "the second one fired and deleted", 10)
    assert len(deliveries.calls) == 2
