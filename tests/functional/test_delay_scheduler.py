"""batch-delay and the rehydrator with DelayOrchestrator=Scheduler, against in-process moto.

moto stores schedules but never fires them: a test fires one by doing what its target does (the SQS
universal target's call with the schedule's input, or the rehydrator with it), as the local runtime's
emulation does (sluice_local.emulation.scheduler_runtime).
"""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from aws_lambda_powertools import Logger
from moto import mock_aws

from sluice.delay.parker import BatchDelay
from sluice.delay.rehydrator import Rehydrator
from sluice.delay.schedule import bucket_of, send_delayed
from sluice.delay.scheduler import SQS_SEND_TARGET, fire_time
from sluice.delay.settings import DelaySettings
from sluice.envelope import ATTRIBUTE
from sluice_local.emulation.sqs_events import drain, receive_event
from tests.conftest import TEST_SEAL, create_waiting_state_machine, envelope_key_secret
from tests.doubles import RecordingMetrics

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
REGION = "us-east-1"
ACCOUNT = "123456789012"
GROUP = "sluice-delays"
HOURS_3 = 3 * 3600


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class World:
    def __init__(self) -> None:
        session = boto3.Session(region_name=REGION)
        self.sqs, self.s3 = session.client("sqs"), session.client("s3")
        self.sfn, self.scheduler = session.client("stepfunctions"), session.client("scheduler")
        self.delay_url = self.sqs.create_queue(QueueName="delay")["QueueUrl"]
        self.target = self.sqs.create_queue(QueueName="work")["QueueUrl"]
        self.poison = self.sqs.create_queue(QueueName="poison")["QueueUrl"]
        self.s3.create_bucket(Bucket="parked")
        self.s3.create_bucket(Bucket="claims")
        self.scheduler.create_schedule_group(Name=GROUP)
        self.machine = create_waiting_state_machine(self.sfn, session.client("iam"), "delay")
        self.settings = DelaySettings.from_env(
            {
                "SLUICE_DELAY_BUCKET": "parked",
                "SLUICE_DELAY_STATE_MACHINE_ARN": self.machine,
                "SLUICE_DELAY_TARGETS": self.target,
                "SLUICE_DIRECT_SEND_THRESHOLD_SECONDS": "900",
                "SLUICE_DELAY_BUCKET_SECONDS": "60",
                "SLUICE_POISON_QUEUE_URL": self.poison,
                "SLUICE_ENVELOPE_KEY_SECRET": envelope_key_secret(),
                "SLUICE_CLAIM_CHECK_BUCKETS": "claims",
                "SLUICE_DELAY_ORCHESTRATOR": "scheduler",
                "SLUICE_DELAY_SCHEDULE_GROUP": GROUP,
                "SLUICE_DELAY_SCHEDULER_ROLE_ARN": f"arn:aws:iam::{ACCOUNT}:role/delay-scheduler",
                "SLUICE_DELAY_REHYDRATOR_ARN": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:rehydrator",
                "SLUICE_DELAY_SCHEDULE_DLQ_ARN": f"arn:aws:sqs:{REGION}:{ACCOUNT}:delay-schedule-dlq",
            }
        )
        self.clock = Clock(NOW)
        self.metrics = RecordingMetrics()
        self.log = io.StringIO()
        self.service = f"sluice-test-{uuid.uuid4().hex}"

    def delayer(self) -> BatchDelay:
        return BatchDelay(
            settings=self.settings, sqs=self.sqs, s3=self.s3, sfn=self.sfn, scheduler=self.scheduler,
            logger=Logger(service=self.service, stream=self.log), metrics_sink=self.metrics,
            clock=self.clock, seal=TEST_SEAL,
        )  # fmt: skip

    def rehydrator(self) -> Rehydrator:
        return Rehydrator(
            settings=self.settings, sqs=self.sqs, s3=self.s3,
            logger=Logger(service=self.service, stream=self.log), metrics_sink=self.metrics,
            clock=self.clock, seal=TEST_SEAL,
        )  # fmt: skip

    def request(self, body: str, seconds: float, group: str | None = None, **attributes: str) -> str:
        return send_delayed(
            self.sqs, delay_queue_url=self.delay_url, target=self.target, body=body,
            deliver_at=NOW + timedelta(seconds=seconds),
            attributes={k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()},
            group_id=group,
        )  # fmt: skip

    def batch(self, count: int) -> dict[str, Any]:
        return receive_event(self.sqs, self.delay_url, f"arn:aws:sqs:{REGION}:{ACCOUNT}:delay", count)

    def schedules(self) -> list[dict[str, Any]]:
        listed = self.scheduler.list_schedules(GroupName=GROUP)["Schedules"]
        return [dict(self.scheduler.get_schedule(GroupName=GROUP, Name=s["Name"])) for s in listed]

    def fire(self, schedule: dict[str, Any], *, delays: bool = True) -> None:
        """What the Scheduler does at the schedule's time: call its target with its input (``delays``
        False: without the SQS targets' DelaySeconds, so a test reads the messages without waiting)."""
        target = schedule["Target"]
        payload = json.loads(target["Input"])
        if not delays:
            payload.pop("DelaySeconds", None)
        if target["Arn"] == SQS_SEND_TARGET:
            self.sqs.send_message(**payload)
        else:
            assert target["Arn"] == self.settings.delay_rehydrator_arn
            self.rehydrator().handle(payload)

    def parked(self) -> list[str]:
        return [o["Key"] for o in self.s3.list_objects_v2(Bucket="parked").get("Contents", [])]

    def executions(self) -> int:
        return len(self.sfn.list_executions(stateMachineArn=self.machine)["executions"])


@pytest.fixture
def world():
    with mock_aws():
        yield World()


def test_one_message_is_an_sqs_send_message_schedule_with_its_message_inline(world):
    world.request('{"n": 1}', HOURS_3 + 7, tenant="acme")
    response = world.delayer().handle(world.batch(1))
    assert response == {"batchItemFailures": []}
    [schedule] = world.schedules()
    bucket = bucket_of(NOW + timedelta(seconds=HOURS_3), 60)
    at = datetime.fromtimestamp(fire_time(bucket, NOW), tz=UTC)
    assert schedule["ScheduleExpression"] == f"at({at:%Y-%m-%dT%H:%M:%S})"
    assert schedule["ActionAfterCompletion"] == "DELETE"
    assert schedule["Target"]["Arn"] == SQS_SEND_TARGET
    assert schedule["Target"]["DeadLetterConfig"]["Arn"] == world.settings.delay_schedule_dlq_arn
    # the longest retry docs/delays.md states: 185 attempts over 24 h
    retry = {"MaximumEventAgeInSeconds": 86_400, "MaximumRetryAttempts": 185}
    assert schedule["Target"]["RetryPolicy"] == retry
    assert world.parked() == []
    assert world.executions() == 0
    assert world.metrics.values["DelaySchedulesCreated"] == 1
    assert world.metrics.values["MessagesDelayed"] == 1
    payload = json.loads(schedule["Target"]["Input"])
    assert payload["DelaySeconds"] == HOURS_3 + 7 - (at - NOW).total_seconds()  # fixed at creation

    world.fire(schedule, delays=False)
    [got] = drain(world.sqs, world.target)
    assert json.loads(got["Body"]) == {"n": 1}
    assert ATTRIBUTE in got["MessageAttributes"]  # the envelope and the user's attribute travel with it
    assert got["MessageAttributes"]["tenant"]["StringValue"] == "acme"


def test_a_tenant_s_scheduled_messages_keep_their_group_through_both_kinds_of_schedule(world):
    # Given tenant-a's request alone in one bucket (an SQS-target schedule) and two in another (rehydrator)
    world.request("alone", HOURS_3, group="tenant-a")
    world.request("pair-1", 2 * HOURS_3, group="tenant-a")
    world.request("pair-2", 2 * HOURS_3 + 1, group="tenant-a")
    assert world.delayer().handle(world.batch(3)) == {"batchItemFailures": []}
    schedules = world.schedules()
    [sqs_target] = [s for s in schedules if s["Target"]["Arn"] == SQS_SEND_TARGET]
    assert json.loads(sqs_target["Target"]["Input"])["MessageGroupId"] == "tenant-a"
    # When both fire, once every message is due
    world.clock.now = NOW + timedelta(seconds=2 * HOURS_3 + 1)
    for schedule in schedules:
        world.fire(schedule, delays=False)
    # Then every message reaches its target with its group id
    delivered = drain(world.sqs, world.target)
    assert sorted(m["Body"] for m in delivered) == ["alone", "pair-1", "pair-2"]
    assert {m["Attributes"]["MessageGroupId"] for m in delivered} == {"tenant-a"}


def test_two_messages_or_more_go_to_the_rehydrator_never_to_a_batch_sqs_target(world):
    # SQS answers a SendMessageBatch whose entries failed with a success: the Scheduler would not see it
    for i in range(2):
        world.request(f'{{"n": {i}}}', HOURS_3 + i)
    world.delayer().handle(world.batch(2))
    [schedule] = world.schedules()
    assert schedule["Target"]["Arn"] == world.settings.delay_rehydrator_arn


def test_a_redelivered_batch_creates_no_second_schedule(world):
    for i in range(4):
        world.request(f'{{"n": {i}}}', HOURS_3)
    event = world.batch(4)
    assert world.delayer().handle(event) == {"batchItemFailures": []}
    assert world.delayer().handle(event) == {"batchItemFailures": []}  # SQS delivered it again
    assert len(world.schedules()) == 1
    assert world.metrics.values["DelaySchedulesCreated"] == 1  # summed over both invocations
    assert "not created twice" in world.log.getvalue()


def test_a_large_bucket_batch_goes_to_the_rehydrator_which_sends_the_residual_delay(world):
    for i in range(15):
        world.request(f'{{"n": {i}}}', HOURS_3 + i % 7)
    world.delayer().handle(world.batch(15))
    [schedule] = world.schedules()
    assert schedule["Target"]["Arn"] == world.settings.delay_rehydrator_arn
    world.clock.now = NOW + timedelta(seconds=HOURS_3 - 45)  # the Scheduler fired 15 s late
    world.fire(schedule)
    assert world.metrics.values["MessagesRehydrated"] == 15
    depth = world.sqs.get_queue_attributes(QueueUrl=world.target, AttributeNames=["All"])["Attributes"]
    assert depth["ApproximateNumberOfMessagesDelayed"] == "15"  # each with its residual, due - now
    assert world.parked() == []


def test_a_message_too_large_for_a_schedule_falls_back_to_s3_and_the_state_machine(world):
    world.request("x" * 300_000, HOURS_3)
    world.request('{"small": true}', HOURS_3)
    response = world.delayer().handle(world.batch(2))
    assert response == {"batchItemFailures": []}
    [schedule] = world.schedules()
    assert len(json.loads(schedule["Target"]["Input"]).get("MessageBody", "")) < 100  # the small one
    assert len(world.parked()) == 1
    assert world.executions() == 1
    assert "too large for a schedule's input" in world.log.getvalue()


def test_a_forged_request_takes_the_existing_safe_path(world):
    world.sqs.send_message(QueueUrl=world.delay_url, MessageBody='{"forged": true}')  # no envelope
    response = world.delayer().handle(world.batch(1))
    assert response == {"batchItemFailures": []}
    assert world.schedules() == []
    [poisoned] = drain(world.sqs, world.poison)
    assert json.loads(poisoned["Body"]) == {"forged": True}


def test_a_schedule_that_cannot_be_created_retries_its_records(world):
    world.scheduler.delete_schedule_group(Name=GROUP)
    ids = [world.request(f'{{"n": {i}}}', HOURS_3) for i in range(2)]
    event = world.batch(2)
    response = world.delayer().handle(event)
    assert sorted(f["itemIdentifier"] for f in response["batchItemFailures"]) == sorted(
        r["messageId"] for r in event["Records"]
    )
    assert len(ids) == 2
    assert world.parked() == []


def twelve_scheduled(world: Any) -> dict[str, Any]:
    """Twelve requests parked in one schedule invoking the rehydrator: its input (the rehydrator's event)."""
    for i in range(12):
        world.request(f'{{"n": {i}}}', HOURS_3)
    world.delayer().handle(world.batch(12))
    [schedule] = world.schedules()
    return dict(json.loads(schedule["Target"]["Input"]))


def test_a_scheduled_message_for_a_queue_outside_the_allowlist_is_poisoned(world):
    payload = twelve_scheduled(world)
    elsewhere = world.sqs.create_queue(QueueName="elsewhere")["QueueUrl"]
    payload["parked"]["messages"][0]["target"] = elsewhere  # a forged invocation of the rehydrator
    world.clock.now = NOW + timedelta(seconds=HOURS_3)  # due: residual 0, readable at once
    world.rehydrator().handle(payload)
    assert len(drain(world.sqs, world.target)) == 11
    assert len(drain(world.sqs, world.poison)) == 1
    assert drain(world.sqs, elsewhere) == []


def test_what_the_target_refuses_is_parked_for_the_sweep(world):
    payload = twelve_scheduled(world)
    world.sqs.delete_queue(QueueUrl=world.target)  # the target is gone for now: not the message's fault
    world.clock.now = NOW + timedelta(seconds=HOURS_3 - 60)
    world.rehydrator().handle(payload)
    [kept] = world.parked()
    assert kept.endswith(f"{payload['scheduled']}.json")
    assert "parked for the sweep" in world.log.getvalue()
