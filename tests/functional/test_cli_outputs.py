"""``sluice outputs``: the stack's outputs with its nested stacks' (workloads, delays, job store), from
CloudFormation stacks in moto, through ``main`` as the console script runs it."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sluice_cli.__main__ import main

QUEUE = {"Q": {"Type": "AWS::SQS::Queue"}}


def _stack(cloudformation: Any, name: str, outputs: dict[str, str]) -> None:
    body = {"Resources": QUEUE, "Outputs": {k: {"Value": v} for k, v in outputs.items()}}
    cloudformation.create_stack(StackName=name, TemplateBody=json.dumps(body))


@pytest.fixture
def stacks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        cloudformation = boto3.client("cloudformation", region_name="us-east-1")
        _stack(cloudformation, "shop-DelayStack-ABC", {"DelayBucketName": "shop-delaybucket-1"})
        _stack(cloudformation, "shop-WorkloadStack-DEF", {"WorkloadNames": "Orders"})
        _stack(
            cloudformation,
            "shop",
            {
                "DelayStack": "shop-DelayStack-ABC",
                "WorkloadStack": "shop-WorkloadStack-DEF",
                "PoisonPillQueueUrl": "p",
                # the local runtime's copy of a nested output on the root (AWS has no dotted keys)
                "DelayStack.DelayBucketName": "shop-delaybucket-1",
            },
        )
        yield


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--stack-name", "shop", *argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_given_nested_stacks_when_outputs_then_theirs_are_listed_with_the_roots(stacks: None) -> None:
    code, out, _ = run("outputs", "--json")
    assert code == 0
    assert json.loads(out) == {
        "DelayStack": "shop-DelayStack-ABC",
        "WorkloadStack": "shop-WorkloadStack-DEF",
        "PoisonPillQueueUrl": "p",
        "DelayBucketName": "shop-delaybucket-1",
        "WorkloadNames": "Orders",
    }


def test_given_a_name_when_outputs_then_only_its_value_is_printed_for_a_shell_variable(stacks: None) -> None:
    code, out, _ = run("outputs", "DelayBucketName")
    assert (code, out) == (0, "shop-delaybucket-1\n")


def test_given_a_name_the_stack_lacks_when_outputs_then_a_usage_error_names_what_it_has(stacks: None) -> None:
    code, out, err = run("outputs", "JobQueueUrl")
    assert code == 2
    assert out == ""
    assert "no output 'JobQueueUrl'" in err
    assert "DelayBucketName" in err
