"""The local runtime refuses, at deploy, the names and batching AWS refuses and moto accepts
(sluice_local.emulation.resource_rules; docs/local.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sluice_local.emulation.cloud import DeployError, LocalCloud
from sluice_local.emulation.resource_rules import resource_problems

VALUES = {"AWS::StackName": "stack", "AWS::Region": "us-east-1", "AWS::AccountId": "123456789012"}


def _function(name: Any) -> dict[str, Any]:
    return {"Type": "AWS::Lambda::Function", "Properties": {"FunctionName": name}}


def _mapping(size: Any, window: Any = None, queue: str = "Queue") -> dict[str, Any]:
    properties: dict[str, Any] = {"EventSourceArn": {"Fn::GetAtt": [queue, "Arn"]}, "FunctionName": "f"}
    if size is not None:
        properties["BatchSize"] = size
    if window is not None:
        properties["MaximumBatchingWindowInSeconds"] = window
    return {"Type": "AWS::Lambda::EventSourceMapping", "Properties": properties}


STANDARD = {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "q"}}
FIFO = {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "q.fifo", "FifoQueue": True}}


def test_given_a_function_name_over_64_characters_when_checked_then_it_names_the_function_value_and_limit():
    name = {"Fn::Sub": "${AWS::StackName}-" + "W" * 50 + "-circuit-breaker"}  # 5 + 1 + 50 + 16 = 72
    [problem] = resource_problems({"Breaker": _function(name)}, VALUES)
    assert problem.startswith(
        f"Breaker: AWS::Lambda::Function FunctionName 'stack-{'W' * 50}-circuit-breaker'"
    )
    assert "is 72 characters: AWS allows 1 to 64" in problem


def test_given_a_function_name_of_64_characters_when_checked_then_it_is_accepted():
    assert resource_problems({"F": _function("f" * 64)}, VALUES) == []


@pytest.mark.parametrize(
    ("resource", "says"),
    [
        (_function("has space"), "does not match"),
        (
            {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "q" * 81}},
            "is 81 characters: AWS allows 1 to 80",
        ),
        ({"Type": "AWS::IAM::Role", "Properties": {"RoleName": "r" * 65}}, "AWS allows 1 to 64"),
        (
            {"Type": "AWS::StepFunctions::StateMachine", "Properties": {"StateMachineName": "s" * 81}},
            "1 to 80",
        ),
        ({"Type": "AWS::CloudWatch::Alarm", "Properties": {"AlarmName": "a" * 256}}, "1 to 255"),
        ({"Type": "AWS::CloudWatch::Dashboard", "Properties": {"DashboardName": "a.b"}}, "does not match"),
        ({"Type": "AWS::Logs::LogGroup", "Properties": {"LogGroupName": "/" + "l" * 512}}, "1 to 512"),
        ({"Type": "AWS::DynamoDB::Table", "Properties": {"TableName": "ab"}}, "3 to 255"),
        ({"Type": "AWS::Events::Rule", "Properties": {"Name": "e" * 65}}, "1 to 64"),
    ],
)
def test_given_a_name_its_service_refuses_when_checked_then_it_is_refused(resource, says):
    [problem] = resource_problems({"It": resource}, VALUES)
    assert problem.startswith("It: ")
    assert says in problem


def test_given_a_name_built_from_a_created_resource_when_checked_then_it_is_left_alone():
    assert resource_problems({"F": _function({"Fn::GetAtt": ["Other", "Name"]})}, VALUES) == []


def test_given_two_dashboards_of_one_name_when_checked_then_the_second_already_exists():
    dashboard = {
        "Type": "AWS::CloudWatch::Dashboard",
        "Properties": {"DashboardName": {"Fn::Sub": "${AWS::StackName}-flow"}},
    }
    problems = resource_problems({"Dashboard": dashboard, "FlowDashboard": dashboard}, VALUES)
    assert problems == [
        "FlowDashboard: AWS::CloudWatch::Dashboard DashboardName 'stack-flow' already exists "
        "(also Dashboard's): a name is unique per account and Region"
    ]


def test_given_names_aws_accepts_twice_or_as_written_when_checked_then_nothing_is_refused():
    # a layer's name given again publishes a version; rules are unique per event bus; an alarm name may
    # hold any character but a control one
    layer = {"Type": "AWS::Lambda::LayerVersion", "Properties": {"LayerName": "common"}}
    resources = {
        "A": layer,
        "B": layer,
        "R1": {"Type": "AWS::Events::Rule", "Properties": {"Name": "tick", "EventBusName": "a"}},
        "R2": {"Type": "AWS::Events::Rule", "Properties": {"Name": "tick", "EventBusName": "b"}},
        "Alarm": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"AlarmName": "Bestellungen-Größe"}},
    }
    assert resource_problems(resources, VALUES) == []


def test_given_two_roles_whose_names_differ_in_case_when_checked_then_iam_refuses_the_second():
    roles = {
        name: {"Type": "AWS::IAM::Role", "Properties": {"RoleName": name}}
        for name in ("App-Role", "app-role")
    }
    [problem] = resource_problems(roles, VALUES)
    assert problem.startswith("app-role: AWS::IAM::Role RoleName 'app-role' already exists (also App-Role's)")


def test_given_two_alarms_of_one_name_when_checked_then_it_is_refused_and_two_inline_policies_are_not():
    alarm = {
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {"AlarmName": {"Fn::Sub": ["${AWS::StackName}-${N}-oldest-message", {"N": "poison"}]}},
    }
    policy = {"Type": "AWS::IAM::Policy", "Properties": {"PolicyName": "consumer"}}
    problems = resource_problems({"A": alarm, "B": alarm, "P": policy, "Q": policy}, VALUES)
    assert problems == [
        "B: AWS::CloudWatch::Alarm AlarmName 'stack-poison-oldest-message' already exists (also A's): "
        "a name is unique per account and Region"
    ]


@pytest.mark.parametrize(
    ("queue", "size", "window", "says"),
    [
        (
            STANDARD,
            100,
            0,
            "BatchSize 100 (above 10) needs MaximumBatchingWindowInSeconds of at least 1, not 0",
        ),
        (STANDARD, 100, None, "needs MaximumBatchingWindowInSeconds of at least 1, not 0"),
        (STANDARD, 10001, 5, "BatchSize 10001 on a standard SQS queue: Lambda allows 1 to 10000"),
        (STANDARD, 0, None, "BatchSize 0 on a standard SQS queue: Lambda allows 1 to 10000"),
        (FIFO, 11, None, "BatchSize 11 on a FIFO SQS queue: Lambda allows 1 to 10"),
        (STANDARD, 10, 301, "MaximumBatchingWindowInSeconds 301: Lambda allows 0 to 300"),
        (
            FIFO,
            10,
            5,
            "MaximumBatchingWindowInSeconds 5 on a FIFO SQS queue: Lambda supports no batching window",
        ),
    ],
)
def test_given_sqs_batching_lambda_refuses_when_checked_then_it_is_refused(queue, size, window, says):
    problems = resource_problems({"Queue": queue, "Source": _mapping(size, window)}, VALUES)
    assert any(problem.startswith("Source: ") and says in problem for problem in problems), problems


@pytest.mark.parametrize(
    ("size", "window"), [(None, None), (10, 0), (11, 1), (10000, 300), ({"Ref": "Size"}, "1")]
)
def test_given_sqs_batching_lambda_accepts_when_checked_then_nothing_is_refused(size, window):
    values = {**VALUES, "Size": "100"}
    assert resource_problems({"Queue": STANDARD, "Source": _mapping(size, window)}, values) == []


def test_given_an_existing_queue_arn_when_checked_then_its_kind_comes_from_the_arn():
    source = {
        "Type": "AWS::Lambda::EventSourceMapping",
        "Properties": {"EventSourceArn": "arn:aws:sqs:us-east-1:123456789012:team.fifo", "BatchSize": 20},
    }
    [problem] = resource_problems({"Source": source}, VALUES)
    assert "BatchSize 20 on a FIFO SQS queue: Lambda allows 1 to 10" in problem


def _deploy(tmp_path: Path, resources: dict[str, Any], stack_name: str) -> None:
    template = tmp_path / "template.yaml"
    template.write_text(json.dumps({"Resources": resources}))
    cloud = LocalCloud(template=template, stack_name=stack_name)
    try:
        cloud.start()
    finally:
        cloud.stop()


def test_given_a_long_stack_name_when_the_project_is_deployed_then_its_workload_function_is_refused():
    # moto itself creates a 68-character function; Lambda refuses it and the stack fails
    stack = "s" * 46  # 46 + 1 + 6 + 16 = 69 > 64
    with pytest.raises(DeployError) as refused:
        LocalCloud(stack_name=stack).start()
    assert (
        f"OrdersCircuitBreakerFunction: AWS::Lambda::Function FunctionName '{stack}-Orders-circuit-breaker' "
        "is 69 characters: AWS allows 1 to 64" in str(refused.value)
    )


def test_given_batch_size_100_without_a_window_when_deployed_then_the_deploy_is_refused(tmp_path):
    resources = {"Queue": STANDARD, "Source": _mapping(100, 0)}
    with pytest.raises(
        DeployError, match="Source: BatchSize 100 \\(above 10\\) needs MaximumBatchingWindowInSeconds"
    ):
        _deploy(tmp_path, resources, "batching")
