"""A template that loops with ``Fn::ForEach`` (``AWS::LanguageExtensions``) deploys into the embedded
cloud as CloudFormation deploys it: one copy of the loop's resources per item, each function running
the code of its own folder, ``Fn::FindInMap`` falling back to its ``DefaultValue`` (Given / When / Then).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from sluice_local.emulation.cloud import DeployError, LocalCloud
from sluice_local.emulation.language_extensions import LanguageExtensionError, expand, main

TEMPLATE = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: [AWS::LanguageExtensions, AWS::Serverless-2016-10-31]
Parameters:
  WorkloadNames:
    Type: CommaDelimitedList
    Default: invoices,sensors
Mappings:
  Workloads:
    invoices: {Timeout: 20}
    sensors: {Timeout: 25, MemorySize: 512}
Resources:
  Done:
    Type: AWS::SQS::Queue
  Fn::ForEach::Workload:
    - Name
    - !Ref WorkloadNames
    - ${Name}Queue:
        Type: AWS::SQS::Queue
        Properties:
          VisibilityTimeout: 180
      ${Name}Function:
        Type: AWS::Serverless::Function
        Properties:
          Runtime: python3.13
          Handler: app.handler
          CodeUri: !Sub workloads/${Name}/
          Timeout: !FindInMap [Workloads, !Ref Name, Timeout]
          MemorySize: !FindInMap [Workloads, !Ref Name, MemorySize, DefaultValue: 256]
          Environment:
            Variables:
              DONE_QUEUE_URL: !Ref Done
              WORKLOAD: !Ref Name
          Policies:
            - SQSSendMessagePolicy: {QueueName: !GetAtt Done.QueueName}
          Events:
            Work:
              Type: SQS
              Properties:
                Queue: !GetAtt [!Sub "${Name}Queue", Arn]
                BatchSize: 1
Outputs:
  Fn::ForEach::QueueUrl:
    - Name
    - !Ref WorkloadNames
    - ${Name}QueueUrl:
        Value: !Ref
          Fn::Sub: ${Name}Queue
  DoneQueueUrl:
    Value: !Ref Done
"""

HANDLER = """\
import os
import boto3

# read at cold start: the local runtime sets a function's environment while its module initializes
DONE_QUEUE_URL = os.environ["DONE_QUEUE_URL"]
WORKLOAD = os.environ["WORKLOAD"]
SQS = boto3.client("sqs")

def handler(event, context):
    for record in event["Records"]:
        SQS.send_message(QueueUrl=DONE_QUEUE_URL, MessageBody=f"{WHO}|{WORKLOAD}|{record['body']}")
"""


def project(tmp_path: Path, template: str = TEMPLATE) -> Path:
    (tmp_path / "template.yaml").write_text(template)
    for name in ("invoices", "sensors"):
        folder = tmp_path / "workloads" / name
        folder.mkdir(parents=True)
        (folder / "app.py").write_text(f"WHO = {name!r}\n" + HANDLER)
    return tmp_path / "template.yaml"


def drain(cloud: LocalCloud, url: str, want: int, timeout: float = 120.0) -> list[str]:
    sqs = cloud.client("sqs")
    bodies: list[str] = []
    deadline = time.monotonic() + timeout
    while len(bodies) < want and time.monotonic() < deadline:
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
            "Messages", []
        ):
            bodies.append(m["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return bodies


@pytest.mark.timeout(300)
def test_given_a_foreach_template_when_deployed_then_each_workload_runs_its_own_code_on_its_own_queue(
    tmp_path: Path,
) -> None:
    # Given a template looping over two workloads, each with its own code folder
    template = project(tmp_path)
    # When it is deployed into the embedded cloud and each queue gets one message
    with LocalCloud(tmp_path, template=template, stack_name="foreach-test") as cloud:
        lam = cloud.client("lambda")
        functions = {
            f["FunctionName"]: f for f in lam.list_functions()["Functions"] if "Function" in f["FunctionName"]
        }
        sqs = cloud.client("sqs")
        for name in ("invoices", "sensors"):
            sqs.send_message(QueueUrl=cloud.outputs[f"{name}QueueUrl"], MessageBody=f"hello {name}")
        done = drain(cloud, cloud.outputs["DoneQueueUrl"], want=2)
    # Then each ran the code of its own folder, with its own settings
    assert sorted(done) == ["invoices|invoices|hello invoices", "sensors|sensors|hello sensors"]
    settings = {
        name: (f["Timeout"], f["MemorySize"])
        for name, f in functions.items()
        for w in ("invoices", "sensors")
        if w in name
    }
    assert sorted(settings.values()) == [(20, 256), (25, 512)]  # MemorySize: the DefaultValue, or its own


def test_given_the_workload_list_as_a_parameter_when_deployed_with_one_then_only_its_resources_exist(
    tmp_path: Path,
) -> None:
    sam = yaml_parse(project(tmp_path).read_text())
    expanded = expand(sam, {"WorkloadNames": "sensors"})
    assert sorted(expanded["Resources"]) == ["Done", "sensorsFunction", "sensorsQueue"]
    assert expanded["Transform"] == ["AWS::Serverless-2016-10-31"]
    function: dict[str, Any] = expanded["Resources"]["sensorsFunction"]["Properties"]
    assert function["CodeUri"] == "workloads/sensors/"  # a folder again, not an Fn::Sub
    assert function["Events"]["Work"]["Properties"]["Queue"] == {"Fn::GetAtt": ["sensorsQueue", "Arn"]}
    assert sorted(expanded["Outputs"]) == ["DoneQueueUrl", "sensorsQueueUrl"]


def test_given_a_template_without_the_transform_when_expanded_then_it_is_left_as_it_is(
    tmp_path: Path,
) -> None:
    sam = yaml_parse(project(tmp_path).read_text().replace("AWS::LanguageExtensions, ", ""))
    assert expand(sam, {}) is sam


def test_given_an_item_the_mapping_lacks_when_deployed_then_the_deploy_fails_naming_it(
    tmp_path: Path,
) -> None:
    template = project(tmp_path)
    with pytest.raises(DeployError, match="ledgers"):
        LocalCloud(
            tmp_path,
            template=template,
            stack_name="foreach-bad",
            parameters={"WorkloadNames": "invoices,ledgers"},
        ).start()


def test_given_an_extension_the_local_runtime_does_not_resolve_when_expanded_then_it_is_named(
    tmp_path: Path,
) -> None:
    text = (
        project(tmp_path)
        .read_text()
        .replace("VisibilityTimeout: 180", "VisibilityTimeout: !Length [!Ref WorkloadNames]")
    )
    with pytest.raises(LanguageExtensionError, match=r"Fn::Length is not resolved by the local runtime"):
        expand(yaml_parse(text), {})


def test_given_the_command_line_when_run_then_it_prints_the_expanded_template_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a looping template (what scripts/security_scan.py hands checkov, expanded by this command)
    template = project(tmp_path)
    # When expanded from the command line, for one workload
    code = main([str(template), "WorkloadNames=sensors"])
    # Then the JSON on stdout holds that workload's resources and no loop
    printed = json.loads(capsys.readouterr().out)
    assert code == 0
    assert sorted(printed["Resources"]) == ["Done", "sensorsFunction", "sensorsQueue"]
    assert "Fn::ForEach" not in json.dumps(printed)
    # and a parameter not written Name=Value is refused with the usage
    assert main([str(template), "WorkloadNames"]) == 2
