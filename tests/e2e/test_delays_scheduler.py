"""Long delays with DelayOrchestrator=Scheduler through the deployed template: delay queue → batch-delay →
EventBridge Scheduler one-time schedules (the messages inline) → the work queue, or the rehydrator →
the work queue; no S3 object, no state machine execution (the local runtime fires the schedules:
sluice_local.emulation.one_time)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from sluice_local.app.fast import FAST
from sluice_local.app.messages import ORDERS
from sluice_local.demo.scenarios import delay, runner
from sluice_local.testing import RunningStack
from tests.e2e.conftest import _session_stack
from tests.waiting import wait_for

THRESHOLD = float(FAST["DirectSendThresholdSeconds"])
GROUP = "sluice-e2e-sched-delays"


@pytest.fixture(scope="module")
def scheduler_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    params = {"DelayOrchestrator": "Scheduler"}
    yield from _session_stack(tmp_path_factory, "sluice-e2e-sched", params, workloads=(ORDERS,))


# Under --fast a parked message is due seconds away, so its window's whole minute has passed and every
# schedule invokes the rehydrator (sluice.delay.scheduler); the SQS sendMessage target needs a window a
# minute or more ahead: tests/functional/test_delay_scheduler.py and test_one_time_schedules.py fire it.
@pytest.mark.parametrize("count", [1, 12], ids=["one-message", "twelve-messages"])
def test_parked_messages_ride_schedules_and_arrive_on_time(scheduler_stack, capsys, count):
    stack = scheduler_stack.stack
    target = "a schedule invoking the rehydrator"
    scenario = delay.Delayed(f"delay-scheduled-{count}", THRESHOLD * 2 + 2, count, route=target)
    [outcome] = runner.run(stack, [scenario])
    with capsys.disabled():  # the measured lag belongs in the test output
        print(f"\n  {outcome.name}: {outcome.observed}")
    assert outcome.ok, f"{outcome.name}: expected {outcome.expected}; observed {outcome.observed}"
    # parked in schedules, not in S3 and not by the state machine
    s3, sfn = stack.client("s3"), stack.client("stepfunctions")
    assert s3.list_objects_v2(Bucket=stack.outputs["DelayBucketName"]).get("KeyCount", 0) == 0
    assert sfn.list_executions(stateMachineArn=stack.outputs["DelayStateMachineArn"])["executions"] == []
    # a fired schedule is deleted (ActionAfterCompletion: DELETE)
    scheduler = stack.client("scheduler")
    assert scheduler.list_schedules(GroupName=GROUP)["Schedules"] == []
    # and nothing reached the schedules' dead-letter queue
    dlq = stack.outputs["DelayScheduleDeadLetterQueueUrl"]
    depth = stack.client("sqs").get_queue_attributes(QueueUrl=dlq, AttributeNames=["All"])["Attributes"]
    assert depth["ApproximateNumberOfMessages"] == "0"


def _scheduler_settings(stack) -> dict[str, str]:
    function = stack.outputs["BatchDelayFunctionName"]
    return stack.client("lambda").get_function_configuration(FunctionName=function)["Environment"][
        "Variables"
    ]


def test_a_schedule_whose_target_keeps_failing_leaves_its_input_in_the_dead_letter_queue(scheduler_stack):
    stack = scheduler_stack.stack
    env = _scheduler_settings(stack)
    # the schedules' role may send to the delay targets only: the poison queue refuses it
    poison = stack.outputs["PoisonPillQueueUrl"]
    at = (datetime.now(UTC) + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S")
    payload = json.dumps({"QueueUrl": poison, "MessageBody": '{"n": 1}'})
    role, dead_letter = env["SLUICE_DELAY_SCHEDULER_ROLE_ARN"], env["SLUICE_DELAY_SCHEDULE_DLQ_ARN"]
    stack.client("scheduler").create_schedule(
        Name="e2e-refused", GroupName=GROUP, ScheduleExpression=f"at({at})",
        FlexibleTimeWindow={"Mode": "OFF"},
        ActionAfterCompletion="DELETE",
        Target={"Arn": "arn:aws:scheduler:::aws-sdk:sqs:sendMessage", "RoleArn": role, "Input": payload,
                "DeadLetterConfig": {"Arn": dead_letter}},
    )  # fmt: skip
    sqs = stack.client("sqs")
    dlq = stack.outputs["DelayScheduleDeadLetterQueueUrl"]

    def dead_lettered() -> list[dict] | None:
        got = sqs.receive_message(QueueUrl=dlq, MessageAttributeNames=["All"], WaitTimeSeconds=1)
        return got.get("Messages") or None

    [message] = wait_for(dead_lettered, "the refused schedule's input in the dead-letter queue", 60)
    assert json.loads(message["Body"]) == json.loads(payload)
    assert message["MessageAttributes"]["ERROR_CODE"]["StringValue"]
    assert message["MessageAttributes"]["SCHEDULE_ARN"]["StringValue"].endswith(f"{GROUP}/e2e-refused")
    wait_for(
        lambda: not stack.client("scheduler").list_schedules(GroupName=GROUP)["Schedules"], "deleted", 30
    )
    sqs.delete_message(QueueUrl=dlq, ReceiptHandle=message["ReceiptHandle"])


@pytest.mark.parametrize(
    ("name", "size", "why"),
    [("not a name!", 10, "Name"), ("too-big", 300_000, "Input")],
    ids=["name", "input-size"],
)
def test_create_schedule_refuses_what_aws_refuses(scheduler_stack, name, size, why):
    stack = scheduler_stack.stack
    env = _scheduler_settings(stack)
    client = stack.client("scheduler")
    role = env["SLUICE_DELAY_SCHEDULER_ROLE_ARN"]
    at = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    with pytest.raises(client.exceptions.ValidationException, match=why):
        client.create_schedule(
            Name=name, GroupName=GROUP, ScheduleExpression=f"at({at})", FlexibleTimeWindow={"Mode": "OFF"},
            Target={"Arn": env["SLUICE_DELAY_REHYDRATOR_ARN"], "RoleArn": role,
                    "Input": json.dumps({"x": "y" * size})},
        )  # fmt: skip


def test_the_delays_dashboard_shows_the_schedule_dead_letter_queue_and_its_alarm(scheduler_stack):
    stack = scheduler_stack.stack
    body = stack.client("cloudwatch").get_dashboard(DashboardName=stack.outputs["DelaysDashboardName"])
    widgets = json.loads(body["DashboardBody"])["widgets"]
    titles = [w["properties"].get("title", "") for w in widgets]
    assert "delay schedule DLQ: depth and age" in titles
    alarms = [a for w in widgets if w["type"] == "alarm" for a in w["properties"]["alarms"]]
    assert any(a.endswith(":alarm:sluice-e2e-sched-delay-schedule-dlq-depth") for a in alarms)
