"""The local runtime emulates, as AWS does, what moto does not: schedules, alarms, event delivery."""

from __future__ import annotations

import json
import time
from pathlib import Path

from sluice_local.testing import port_is_closed, start_stack

FIXTURE = Path(__file__).parent / "fixtures" / "wiring" / "template.yaml"


def recorded(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"recorded"')]


def wait_for(predicate, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"condition not met within {timeout}s")


def test_schedules_fire_and_alarm_state_changes_reach_sns_and_eventbridge_subscribers(tmp_path):
    running = start_stack(
        tmp_path, stack_name="sluice-wiring", template=FIXTURE, params={"TickRate": "rate(1 second)"}
    )
    log = running.stack.log_path
    try:
        # Schedule (EventBridge rule) and ScheduleV2 (EventBridge Scheduler) both fire at their rate
        wait_for(lambda: sum(r["recorded"] == "schedule" for r in recorded(log)) >= 2)
        wait_for(lambda: sum(r["recorded"] == "schedule-v2" for r in recorded(log)) >= 2)

        # A visible message breaches the alarm → ALARM delivered to SNS and EventBridge subscribers
        sqs = running.stack.client("sqs")
        inbox = running.stack.outputs["InboxUrl"]
        sqs.send_message(QueueUrl=inbox, MessageBody="wake up")
        sns_alarm = wait_for(
            lambda: [
                r for r in recorded(log) if r["recorded"] == "sns" and r["detail"]["NewStateValue"] == "ALARM"
            ]
        )
        assert sns_alarm[0]["detail"]["Trigger"]["MetricName"] == "ApproximateNumberOfMessagesVisible"
        wait_for(
            lambda: [
                r
                for r in recorded(log)
                if r["recorded"] == "eventbridge" and r["detail"]["state"]["value"] == "ALARM"
            ]
        )
        cloudwatch = running.stack.client("cloudwatch")
        alarm = cloudwatch.describe_alarms()["MetricAlarms"][0]
        assert alarm["StateValue"] == "ALARM"

        # A Step Functions Lambda task runs the stack's real function
        sfn = running.stack.client("stepfunctions")
        execution = sfn.start_execution(stateMachineArn=running.stack.outputs["HelloArn"], input='{"n": 1}')
        status = wait_for(
            lambda: (
                sfn.describe_execution(executionArn=execution["executionArn"])["status"] != "RUNNING"
                and sfn.describe_execution(executionArn=execution["executionArn"])
            )
        )
        assert status["status"] == "SUCCEEDED", status
        assert json.loads(status["output"]) == {"recorded": "stepfunctions"}
        assert [r for r in recorded(log) if r["recorded"] == "stepfunctions"]

        # Draining the queue returns the alarm to OK, delivered the same way
        for message in sqs.receive_message(QueueUrl=inbox, MaxNumberOfMessages=10).get("Messages", []):
            sqs.delete_message(QueueUrl=inbox, ReceiptHandle=message["ReceiptHandle"])
        wait_for(
            lambda: [
                r for r in recorded(log) if r["recorded"] == "sns" and r["detail"]["NewStateValue"] == "OK"
            ]
        )
    finally:
        code = running.stop()
    assert code == 0
    assert port_is_closed(running.port)
