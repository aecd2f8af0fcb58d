"""`sluice dlq redrive --native`: SQS StartMessageMoveTask (moto lacks it, so botocore's Stubber).

Every test states the exact request the CLI must make; the Stubber fails on any other call, and
``assert_no_pending_responses`` proves the expected calls were made.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from sluice_cli.__main__ import main
from sluice_cli.clients import Clients
from sluice_cli.resources import Resources

DLQ_ARN = "arn:aws:sqs:us-east-1:123456789012:sluice-dev-work-dlq"
WORK_ARN = "arn:aws:sqs:us-east-1:123456789012:sluice-dev-work"
TABLE = "sluice-dev-breaker"
HANDLE = "eyJ0YXNrSWQiOiJkYTFiMjM0NS0xMjM0In0="
RESOURCES = Resources(
    stack_name="sluice-dev",
    dead_letter_queue_arn=DLQ_ARN,
    work_queue_arn=WORK_ARN,
    dead_letter_queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/sluice-dev-work-dlq",
    breaker_table=TABLE,
)
BREAKER_KEY = {"TableName": TABLE, "Key": {"id": {"S": "redrive"}}, "ConsistentRead": True}


@dataclass
class Stubbed:
    sqs: Stubber
    dynamodb: Stubber
    clients: Clients

    def run(self, *argv: str, resources: Resources = RESOURCES) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = main(list(argv), clients=self.clients, resources=resources, stdout=out, stderr=err)
        return code, out.getvalue(), err.getvalue()

    def breaker_closed(self) -> None:
        self.dynamodb.add_response("get_item", {}, BREAKER_KEY)

    def breaker_open(self, reason: str) -> None:
        item = {
            "id": {"S": "redrive"},
            "state": {"S": "open"},
            "reason": {"S": reason},
            "opened_by": {"S": "operator"},
            "since": {"N": "1795000000.000"},
            "version": {"N": "3"},
        }
        self.dynamodb.add_response("get_item", {"Item": item}, BREAKER_KEY)


@pytest.fixture
def stubbed() -> Iterator[Stubbed]:
    sqs = boto3.client("sqs", region_name="us-east-1")
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    with Stubber(sqs) as sqs_stub, Stubber(dynamodb) as ddb_stub:
        yield Stubbed(sqs_stub, ddb_stub, Clients.of(sqs=sqs, dynamodb=dynamodb))
        sqs_stub.assert_no_pending_responses()
        ddb_stub.assert_no_pending_responses()


def test_given_max_per_second_when_native_redrive_then_a_move_task_with_that_rate_is_started(stubbed):
    stubbed.breaker_closed()
    stubbed.sqs.add_response(
        "start_message_move_task",
        {"TaskHandle": HANDLE},
        {"SourceArn": DLQ_ARN, "DestinationArn": WORK_ARN, "MaxNumberOfMessagesPerSecond": 25},
    )

    code, stdout, _ = stubbed.run("--json", "dlq", "redrive", "--native", "--yes", "--max-per-second", "25")

    assert code == 0
    assert json.loads(stdout) == {
        "engine": "native",
        "taskHandle": HANDLE,
        "sourceArn": DLQ_ARN,
        "destinationArn": WORK_ARN,
        "maxNumberOfMessagesPerSecond": 25,
    }


def test_given_no_rate_when_native_redrive_then_sqs_default_rate_and_the_handle_is_printed(stubbed):
    stubbed.breaker_closed()
    stubbed.sqs.add_response(
        "start_message_move_task", {"TaskHandle": HANDLE}, {"SourceArn": DLQ_ARN, "DestinationArn": WORK_ARN}
    )

    code, stdout, _ = stubbed.run("dlq", "redrive", "--native", "--yes")

    assert code == 0
    assert HANDLE in stdout
    assert "SQS default" in stdout


@pytest.mark.parametrize("rate", ["2.5", "501"])
def test_given_a_rate_sqs_cannot_take_when_native_redrive_then_usage_error_and_no_call(stubbed, rate):
    stubbed.breaker_closed()

    code, stdout, stderr = stubbed.run("dlq", "redrive", "--native", "--yes", "--max-per-second", rate)

    assert code == 2
    assert "whole --max-per-second within 1..500" in stderr
    assert stdout == ""


def test_given_an_open_breaker_when_native_redrive_then_refused_without_calling_sqs(stubbed):
    stubbed.breaker_open("payments API down")

    code, _, stderr = stubbed.run("dlq", "redrive", "--native", "--yes", "--max-per-second", "10")

    assert code == 2
    assert "breaker is open (payments API down)" in stderr
    assert "--ignore-breaker" in stderr


def test_given_an_open_breaker_and_ignore_breaker_when_native_redrive_then_the_task_starts(stubbed):
    stubbed.breaker_open("payments API down")
    stubbed.sqs.add_response(
        "start_message_move_task",
        {"TaskHandle": HANDLE},
        {"SourceArn": DLQ_ARN, "DestinationArn": WORK_ARN, "MaxNumberOfMessagesPerSecond": 10},
    )

    code, stdout, _ = stubbed.run(
        "--json", "dlq", "redrive", "--native", "--yes", "--max-per-second", "10", "--ignore-breaker"
    )

    assert code == 0
    assert json.loads(stdout)["taskHandle"] == HANDLE


def test_given_a_stack_without_a_breaker_table_when_native_redrive_then_a_warning_and_the_task_starts(
    stubbed,
):
    stubbed.sqs.add_response(
        "start_message_move_task", {"TaskHandle": HANDLE}, {"SourceArn": DLQ_ARN, "DestinationArn": WORK_ARN}
    )
    no_breaker = Resources(stack_name="old", dead_letter_queue_arn=DLQ_ARN, work_queue_arn=WORK_ARN)

    code, _, stderr = stubbed.run("--json", "dlq", "redrive", "--native", "--yes", resources=no_breaker)

    assert code == 0
    assert "no output BreakerTableName: breaker not checked" in stderr


def test_given_sqs_refuses_when_native_redrive_then_exit_1_with_the_error(stubbed):
    stubbed.breaker_closed()
    stubbed.sqs.add_client_error(
        "start_message_move_task",
        service_error_code="InvalidParameterValue",
        service_message="A task is already running for this source",
        http_status_code=400,
        expected_params={"SourceArn": DLQ_ARN, "DestinationArn": WORK_ARN},
    )

    code, stdout, stderr = stubbed.run("--json", "dlq", "redrive", "--native", "--yes")

    assert code == 1
    assert stdout == ""
    assert "StartMessageMoveTask" in stderr
    assert "A task is already running for this source" in stderr


def test_given_move_tasks_when_native_status_then_each_task_is_listed(stubbed):
    tasks: list[dict[str, Any]] = [
        {
            "TaskHandle": HANDLE,
            "Status": "RUNNING",
            "SourceArn": DLQ_ARN,
            "MaxNumberOfMessagesPerSecond": 25,
            "ApproximateNumberOfMessagesMoved": 40,
            "ApproximateNumberOfMessagesToMove": 100,
            "StartedTimestamp": 1795000000000,
        },
        {
            "Status": "FAILED",
            "SourceArn": DLQ_ARN,
            "FailureReason": "AccessDenied",
            "StartedTimestamp": 1794990000000,
        },
    ]
    stubbed.sqs.add_response(
        "list_message_move_tasks",
        {"Results": tasks},
        {"SourceArn": DLQ_ARN, "MaxResults": 10},
    )

    code, stdout, _ = stubbed.run("--json", "dlq", "redrive", "--native", "--status")

    assert code == 0
    listed = json.loads(stdout)["tasks"]
    assert [(t["status"], t["moved"], t["toMove"]) for t in listed] == [
        ("RUNNING", 40, 100),
        ("FAILED", None, None),
    ]
    assert listed[0]["taskHandle"] == HANDLE
    assert listed[0]["maxNumberOfMessagesPerSecond"] == 25
    assert listed[0]["startedAt"] == "2026-11-18T11:06:40+00:00"
    assert listed[1]["failureReason"] == "AccessDenied"


def test_given_a_task_handle_when_native_cancel_then_that_task_is_cancelled(stubbed):
    stubbed.sqs.add_response(
        "cancel_message_move_task", {"ApproximateNumberOfMessagesMoved": 40}, {"TaskHandle": HANDLE}
    )

    code, stdout, _ = stubbed.run("dlq", "redrive", "--native", "--cancel", HANDLE)

    assert code == 0
    assert "cancelled" in stdout
    assert "40" in stdout


def test_given_sluice_engine_options_with_native_when_redrive_then_usage_error_and_no_call(stubbed):
    code, _, stderr = stubbed.run("dlq", "redrive", "--native", "--max", "5")

    assert code == 2
    assert "--max and --timeout apply to sluice's redrive" in stderr


def test_given_no_yes_when_native_redrive_then_usage_error_and_no_call(stubbed):
    code, _, stderr = stubbed.run("dlq", "redrive", "--native", "--max-per-second", "10")
    assert code == 2
    assert "add --yes to confirm" in stderr
    stubbed.sqs.assert_no_pending_responses()
