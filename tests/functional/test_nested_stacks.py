"""A template with nested applications (``AWS::Serverless::Application`` whose ``Location`` is a file
beside it) deploys into the embedded cloud as ``sam deploy`` and CloudFormation deploy it: the child's
resources exist with the parameters the parent passes, named by the nested stack's own name, its
outputs reach the parent, a nested application whose condition is false is left out; what
CloudFormation would refuse is refused (Given / When / Then)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sluice_local.emulation.cloud import DeployError, LocalCloud
from sluice_local.emulation.language_extensions import with_nested
from sluice_local.emulation.nested import local_template, nested_stack_suffix
from sluice_local.emulation.template import translate
from tests.functional.test_language_extensions import HANDLER, drain

ROOT = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: [AWS::LanguageExtensions, AWS::Serverless-2016-10-31]
Parameters:
  Workloads:
    Type: CommaDelimitedList
    Default: invoices,sensors
  Stage:
    Type: String
    Default: dev
  WithAudit:
    Type: String
    Default: "yes"
Conditions:
  Audit: !Equals [!Ref WithAudit, "yes"]
  Never: !Equals [!Ref Stage, never]
Resources:
  Done:
    Type: AWS::SQS::Queue
  Workers:
    Type: AWS::Serverless::Application
    Properties:
      Location: stacks/workers.yaml
      Parameters:
        Names: !Join [",", !Ref Workloads]
        DoneQueueUrl: !Ref Done
        DoneQueueArn: !GetAtt Done.Arn
        Stage: !Ref Stage
  Audit:
    Type: AWS::Serverless::Application
    Condition: Audit
    Properties:
      Location: stacks/audit.yaml
  Skipped:
    Type: AWS::Serverless::Application
    Condition: Never
    Properties:
      Location: stacks/missing.yaml
  AuditCopy:
    Type: AWS::SQS::Queue
    Condition: Audit
    Properties:
      QueueName: !Sub "${Audit.Outputs.QueueName}-copy"
Outputs:
  Fn::ForEach::QueueUrl:
    - Name
    - !Ref Workloads
    - ${Name}QueueUrl:
        Value: !GetAtt [Workers, !Sub "Outputs.${Name}QueueUrl"]
  DoneQueueUrl:
    Value: !Ref Done
  WorkersStack:
    Value: !Ref Workers
"""

WORKERS = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: [AWS::LanguageExtensions, AWS::Serverless-2016-10-31]
Parameters:
  Names:
    Type: CommaDelimitedList
  DoneQueueUrl:
    Type: String
  DoneQueueArn:
    Type: String
  Stage:
    Type: String
    AllowedValues: [dev, prod]
  Memory:
    Type: Number
    Default: 256
Conditions:
  IsProd: !Equals [!Ref Stage, prod]
Resources:
  Fn::ForEach::Worker:
    - Name
    - !Ref Names
    - ${Name}Queue:
        Type: AWS::SQS::Queue
        Properties:
          QueueName: !Sub "${AWS::StackName}-${Name}"
          VisibilityTimeout: 180
      ${Name}Function:
        Type: AWS::Serverless::Function
        Properties:
          Runtime: python3.13
          Handler: app.handler
          CodeUri: !Sub ../workloads/${Name}/
          MemorySize: !If [IsProd, 1024, !Ref Memory]
          Environment:
            Variables:
              DONE_QUEUE_URL: !Ref DoneQueueUrl
              WORKLOAD: !Sub "${Stage}-${Name}"
          Policies:
            - SQSSendMessagePolicy: {QueueName: !Select [5, !Split [":", !Ref DoneQueueArn]]}
          Events:
            Work:
              Type: SQS
              Properties:
                Queue: !GetAtt [!Sub "${Name}Queue", Arn]
                BatchSize: 1
      ${Name}DepthAlarm:
        Type: AWS::CloudWatch::Alarm
        Properties:
          AlarmName: !Sub "${AWS::StackName}-${Name}-depth"
          Namespace: AWS/SQS
          MetricName: ApproximateNumberOfMessagesVisible
          Dimensions: [{Name: QueueName, Value: !GetAtt [!Sub "${Name}Queue", QueueName]}]
          Statistic: Maximum
          Period: 60
          EvaluationPeriods: 1
          Threshold: 100
          ComparisonOperator: GreaterThanThreshold
Outputs:
  Fn::ForEach::QueueUrl:
    - Name
    - !Ref Names
    - ${Name}QueueUrl:
        Value: !Ref
          Fn::Sub: ${Name}Queue
"""

AUDIT = """\
AWSTemplateFormatVersion: "2010-09-09"
Resources:
  AuditQueue:
    Type: AWS::SQS::Queue
    Properties:
      QueueName: !Sub "${AWS::StackName}-audit"
Outputs:
  QueueName:
    Value: !GetAtt AuditQueue.QueueName
"""


def project(tmp_path: Path, root: str = ROOT, workers: str = WORKERS) -> Path:
    (tmp_path / "stacks").mkdir()
    (tmp_path / "template.yaml").write_text(root)
    (tmp_path / "stacks" / "workers.yaml").write_text(workers)
    (tmp_path / "stacks" / "audit.yaml").write_text(AUDIT)
    for name in ("invoices", "sensors"):
        folder = tmp_path / "workloads" / name
        folder.mkdir(parents=True)
        (folder / "app.py").write_text(f"WHO = {name!r}\n" + HANDLER)
    return tmp_path / "template.yaml"


@pytest.mark.timeout(300)
def test_given_nested_applications_when_deployed_then_the_childs_resources_run_with_what_the_parent_passes(
    tmp_path: Path,
) -> None:
    # Given a root template whose workers are a nested application looping over the root's workloads
    template = project(tmp_path)
    # When it is deployed and each worker's queue (a nested stack's output) gets one message
    with LocalCloud(tmp_path, template=template, stack_name="nested-test") as cloud:
        sqs = cloud.client("sqs")
        for name in ("invoices", "sensors"):
            sqs.send_message(QueueUrl=cloud.outputs[f"{name}QueueUrl"], MessageBody=f"hello {name}")
        done = drain(cloud, cloud.outputs["DoneQueueUrl"], want=2)
        queues = sorted(url.rsplit("/", 1)[-1] for url in sqs.list_queues()["QueueUrls"])
        memory = {
            f["FunctionName"]: f["MemorySize"]
            for f in cloud.client("lambda").list_functions()["Functions"]
            if f["FunctionName"].startswith("nested-test")
        }
        alarms = sorted(a.name for a in cloud.alarms.alarms) if cloud.alarms else []
        cfn = cloud.client("cloudformation")
        [root] = cfn.describe_stacks(StackName="nested-test")["Stacks"]
        [child] = cfn.describe_stacks(StackName=cloud.outputs["WorkersStack"])["Stacks"]
    # Then each child function ran its own code with the parent's values (the Stage, the Done queue)
    assert sorted(done) == ["invoices|dev-invoices|hello invoices", "sensors|dev-sensors|hello sensors"]
    assert set(memory.values()) == {256}  # the child parameter's Default
    # And the child's names are built from the nested stack's own name, as CloudFormation names it
    workers = f"nested-test-{nested_stack_suffix('Workers')}"
    audit = f"nested-test-{nested_stack_suffix('Audit')}-audit"
    assert {f"{workers}-invoices", f"{workers}-sensors", audit, f"{audit}-copy"} <= set(queues)
    assert alarms == [f"{workers}-invoices-depth", f"{workers}-sensors-depth"]
    # And the child's outputs are its own stack's, which the parent's Ref names, as in AWS
    own = {o["OutputKey"] for o in root["Outputs"] if "." not in o["OutputKey"]}
    assert own == {"invoicesQueueUrl", "sensorsQueueUrl", "DoneQueueUrl", "WorkersStack"}
    assert cloud.outputs["WorkersStack"] == workers
    assert {o["OutputKey"]: o["OutputValue"] for o in child["Outputs"]} == {
        "invoicesQueueUrl": cloud.outputs["invoicesQueueUrl"],
        "sensorsQueueUrl": cloud.outputs["sensorsQueueUrl"],
    }


def test_given_parameters_that_choose_when_translated_then_conditions_and_lists_follow_them(
    tmp_path: Path,
) -> None:
    # Given the same project, deployed for prod with one workload and without the audit stack
    template = project(tmp_path)
    translated, artifacts = translate(template, {"Stage": "prod", "Workloads": "sensors", "WithAudit": "no"})
    resources: dict[str, Any] = translated.template["Resources"]
    # Then only the sensors worker exists, with the prod memory; no audit, no skipped application
    assert sorted(lid for lid in resources if lid.startswith(("invoices", "sensors"))) == [
        "sensorsFunction",
        "sensorsFunctionRole",
        "sensorsFunctionWork",
        "sensorsQueue",
    ]
    assert resources["sensorsFunction"]["Properties"]["MemorySize"] == 1024
    assert not any(r.get("Type") == "AWS::CloudFormation::Stack" for r in resources.values())
    assert "AuditQueue" not in resources
    assert resources["AuditCopy"]["Condition"] == "Audit"  # the parent's own: moto leaves it out
    assert list(translated.emulated) == ["sensorsDepthAlarm"]
    # And the child's code is packaged from its own folder, under the nested application's key
    assert list(artifacts) == ["Workers/sensorsFunction.zip"]
    assert (
        translated.code_dirs["Workers/sensorsFunction.zip"] == (tmp_path / "workloads" / "sensors").resolve()
    )


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        # a value the child's AllowedValues refuse
        (lambda root, workers: (root.replace("Default: dev", "Default: test"), workers), "AllowedValues"),
        # a parameter the child does not declare
        (
            lambda root, workers: (
                root.replace("Stage: !Ref Stage", "Stage: !Ref Stage\n        Tier: x"),
                workers,
            ),
            r"\['Tier'\] are not declared",
        ),
        # a parameter the child needs and the parent does not pass
        (
            lambda root, workers: (root.replace("        DoneQueueUrl: !Ref Done\n", ""), workers),
            "DoneQueueUrl",
        ),
        # a child condition on a value that exists only once the parent's resources do
        (
            lambda root, workers: (
                root,
                workers.replace("!Equals [!Ref Stage, prod]", "!Equals [!Ref DoneQueueArn, x]"),
            ),
            r"Conditions read \['DoneQueueArn'\]",
        ),
        # a child resource with a parent's logical id
        (
            lambda root, workers: (
                root.replace("  Done:\n", "  AuditQueue:\n")
                .replace("!Ref Done\n", "!Ref AuditQueue\n")
                .replace("Done.Arn", "AuditQueue.Arn"),
                workers,
            ),
            "AuditQueue is also in the parent",
        ),
        # an output the child does not have
        (
            lambda root, workers: (root.replace("Outputs.QueueName", "Outputs.Nope"), workers),
            "has no output Nope",
        ),
        # a code folder that is not there (relative to the child's own folder, as sam build reads it)
        (
            lambda root, workers: (root, workers.replace("../workloads/", "workloads/")),
            "invoicesFunction: its code folder 'workloads/invoices/'.* is not a folder",
        ),
    ],
    ids=[
        "allowed-values",
        "undeclared",
        "missing",
        "deferred-condition",
        "same-logical-id",
        "no-such-output",
        "no-code-folder",
    ],
)
def test_given_what_cloudformation_refuses_when_deployed_then_the_deploy_fails_naming_it(
    tmp_path: Path, change: Any, refusal: str
) -> None:
    root, workers = change(ROOT, WORKERS)
    template = project(tmp_path, root, workers)
    with pytest.raises(DeployError, match=refusal):
        LocalCloud(tmp_path, template=template, stack_name="nested-bad").start()


def test_given_a_child_parameter_in_a_sub_text_when_translated_then_the_text_names_what_the_parent_passes(
    tmp_path: Path,
) -> None:
    translated, _ = translate(project(tmp_path), {})
    env = translated.template["Resources"]["invoicesFunction"]["Properties"]["Environment"]["Variables"]
    assert env["WORKLOAD"] == {"Fn::Sub": "${Stage}-invoices"}  # the parent's own Stage
    # ... and the child's own stack name is the nested stack's
    queue = translated.template["Resources"]["invoicesQueue"]["Properties"]
    assert queue["QueueName"] == {
        "Fn::Sub": "${AWS::StackName}-" + nested_stack_suffix("Workers") + "-invoices"
    }
    assert env["DONE_QUEUE_URL"] == {"Ref": "Done"}


def test_a_template_url_that_is_already_packaged_is_left_to_cloudformation() -> None:
    stack = {
        "Type": "AWS::CloudFormation::Stack",
        "Properties": {"TemplateURL": "https://b.s3.amazonaws.com/t"},
    }
    assert local_template(stack) is None
    assert local_template({**stack, "Properties": {"TemplateURL": "stacks/jobs.yaml"}}) == "stacks/jobs.yaml"


def test_given_a_conditional_application_when_read_whole_then_its_resources_keep_its_condition(
    tmp_path: Path,
) -> None:
    # Given the project read as one template (what the template tests and checkov read, every nested
    # template being there, as `sam package` needs), the audit application's condition false for these values
    skipped = ROOT[ROOT.index("  Skipped:\n") : ROOT.index("  AuditCopy:\n")]
    whole = with_nested(project(tmp_path, ROOT.replace(skipped, "")), {"WithAudit": "no"})
    resources = whole["Resources"]
    # Then its resources and outputs are there, under its condition (CloudFormation leaves them out
    # only once it evaluates it), and the parent's read of its output is the child's expression
    assert resources["AuditQueue"]["Condition"] == "Audit"
    assert whole["Outputs"]["QueueName"]["Condition"] == "Audit"
    copy_name = resources["AuditCopy"]["Properties"]["QueueName"]
    variable = {"AuditOutputsQueueName": {"Fn::GetAtt": ["AuditQueue", "QueueName"]}}
    assert copy_name == {"Fn::Sub": ["${AuditOutputsQueueName}-copy", variable]}


def test_given_a_condition_of_the_same_name_in_parent_and_child_when_read_whole_then_each_keeps_its_own(
    tmp_path: Path,
) -> None:
    # Given a parent whose IsProd means something else than the workers' own IsProd
    skipped = ROOT[ROOT.index("  Skipped:\n") : ROOT.index("  AuditCopy:\n")]
    root = ROOT.replace(skipped, "").replace(
        "Conditions:\n", 'Conditions:\n  IsProd: !Equals [!Ref WithAudit, "no"]\n'
    )
    # When the application is read as one template
    whole = with_nested(project(tmp_path, root), {})
    # Then the parent's keeps its name and meaning, and the child's is renamed under its application
    assert whole["Conditions"]["IsProd"] == {"Fn::Equals": [{"Ref": "WithAudit"}, "no"]}
    assert whole["Conditions"]["WorkersIsProd"] == {
        "Fn::Equals": [{"Ref": "Stage"}, "prod"]
    }  # the parent's Stage
    memory = whole["Resources"]["invoicesFunction"]["Properties"]["MemorySize"]
    assert memory["Fn::If"][0] == "WorkersIsProd"
