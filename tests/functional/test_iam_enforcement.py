"""The local runtime's IAM enforcement on a small stack: a function's calls run as its role, the record
names the statements that granted them, a statement taken out refuses the call it granted, and the
least-privilege report lists what nothing used."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from sluice_local.emulation.cloud import LocalCloud
from sluice_local.emulation.iam import report
from sluice_local.emulation.iam.enforce import statement_key
from tests.waiting import wait_for

TEMPLATE = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Resources:
  In:
    Type: AWS::SQS::Queue
  Out:
    Type: AWS::SQS::Queue
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: worker/
      Handler: app.handler
      Runtime: python3.13
      Timeout: 10
      Environment:
        Variables:
          OUT_URL: !Ref Out
      Role: !GetAtt WorkerRole.Arn
      Events:
        Work:
          Type: SQS
          Properties:
            Queue: !GetAtt In.Arn
            BatchSize: 1
  WorkerRole:
    Type: AWS::IAM::Role
    Properties:
      AssumeRolePolicyDocument:
        Version: "2012-10-17"
        Statement:
          - Effect: Allow
            Principal: {Service: lambda.amazonaws.com}
            Action: sts:AssumeRole
      Policies:
        - PolicyName: worker
          PolicyDocument:
            Version: "2012-10-17"
            Statement:
              - Sid: PollIn
                Effect: Allow
                Action: [sqs:ReceiveMessage, sqs:DeleteMessage, sqs:GetQueueAttributes]
                Resource: !GetAtt In.Arn
              - Sid: ForwardToOut
                Effect: Allow
                Action: sqs:SendMessage
                Resource: !GetAtt Out.Arn
              - Sid: NeverUsed
                Effect: Allow
                Action: sqs:PurgeQueue
                Resource: !GetAtt Out.Arn
Outputs:
  InUrl:
    Value: !Ref In
  OutUrl:
    Value: !Ref Out
"""

HANDLER = """\
import os
import boto3

SQS = boto3.client("sqs")
OUT_URL = os.environ["OUT_URL"]  # the local runtime sets a function's environment while it initializes

def handler(event, context):
    for record in event["Records"]:
        SQS.send_message(QueueUrl=OUT_URL, MessageBody=record["body"])
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "template.yaml").write_text(TEMPLATE)
    (tmp_path / "worker").mkdir()
    (tmp_path / "worker" / "app.py").write_text(HANDLER)
    return tmp_path


def _forwarded(cloud: LocalCloud, body: str, timeout: float = 60.0) -> bool:
    sqs, deadline = cloud.client("sqs"), time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in sqs.receive_message(QueueUrl=cloud.outputs["OutUrl"], WaitTimeSeconds=1).get("Messages", []):
            sqs.delete_message(QueueUrl=cloud.outputs["OutUrl"], ReceiptHandle=m["ReceiptHandle"])
            if m["Body"] == body:
                return True
    return False


def _refused(cloud: LocalCloud, action: str) -> list[Any]:
    found: list[Any] = wait_for(
        lambda: [d for d in cloud.iam.record.denials if d.action == action], f"a refusal of {action}", 60
    )
    return found


def _key(cloud: LocalCloud, sid: str) -> str:
    """The statement ``sid``'s key, as the record and ``Enforcer.without`` name it."""
    policies = report.stack_policies(cloud.iam, cloud.stack_name, [cloud.region])
    [key] = [statement_key(s) for p in policies for s in p.statements if s.sid == sid]
    return key


def _general(cloud: LocalCloud, key: str) -> str:
    """The same key as the usage report names it (the stack as ``<stack>``, so runs merge)."""
    return key.replace(cloud.stack_name, "<stack>")


@pytest.mark.timeout(180)
def test_given_a_function_when_it_runs_then_its_calls_are_its_roles_and_the_record_names_each_statement(
    project: Path,
) -> None:
    with LocalCloud(project, stack_name="iam-small") as cloud:
        # Given a message for the worker
        cloud.client("sqs").send_message(QueueUrl=cloud.outputs["InUrl"], MessageBody="one")
        # When its mapping polls (as the function's role) and the function forwards it (as its role)
        assert _forwarded(cloud, "one")
        # Then each call was granted by its statement, to the role, and nothing was refused
        granted = {(g.principal, g.action): g.statements for g in cloud.iam.record.grants}
        role = next(p for p, a in granted if a == "sqs:SendMessage" and p.startswith("role:"))
        assert role.startswith("role:iam-small-WorkerRole")
        assert granted[(role, "sqs:ReceiveMessage")] == (_key(cloud, "PollIn"),)
        assert granted[(role, "sqs:SendMessage")] == (_key(cloud, "ForwardToOut"),)
        assert cloud.iam.record.denials == []
        # and the least-privilege report names the statement nothing used, unless it is justified
        policies = report.stack_policies(cloud.iam, cloud.stack_name, [cloud.region])
        uses = report.usage(cloud.iam, policies, cloud.stack_name)
        lines, unjustified = report.least_privilege(uses, {})
        never = _general(cloud, _key(cloud, "NeverUsed"))
        assert never.startswith("role:<stack>-WorkerRole/worker#")
        assert never in unjustified
        # the rest: actions of used statements nothing used (the local poller never reads the attributes)
        assert all(
            entry.startswith("role:<stack>-WorkerRole/worker#PollIn sqs:")
            for entry in set(unjustified) - {never}
        )
        assert f"granted nothing: {never}  — NOT JUSTIFIED" in lines
        reasons = {"NeverUsed": "an operator's purge", "PollIn sqs:GetQueueAttributes": "the mapping's own"}
        _, unjustified = report.least_privilege(uses, reasons)
        assert unjustified == []
        # and re-deciding each recorded request without one statement names what needs it
        needed = report.replay(cloud.iam)
        out_arn = f"arn:aws:sqs:us-east-1:123456789012:{cloud.outputs['OutUrl'].rsplit('/', 1)[-1]}"
        assert needed[_key(cloud, "ForwardToOut")] == [f"{role} sqs:SendMessage {out_arn}"]


@pytest.mark.timeout(180)
def test_given_a_statement_taken_out_when_its_call_is_made_then_it_is_refused_as_aws_refuses_it(
    project: Path,
) -> None:
    with LocalCloud(project, stack_name="iam-mutant") as cloud:
        # Given the worker's role without the statement that lets it forward
        cloud.iam.without = frozenset({_key(cloud, "ForwardToOut")})
        # When a message arrives
        cloud.client("sqs").send_message(QueueUrl=cloud.outputs["InUrl"], MessageBody="two")
        # Then its send is refused with AWS's message, and nothing reaches Out
        [denial, *_] = _refused(cloud, "sqs:SendMessage")
        assert denial.message.startswith(
            "User: arn:aws:sts::123456789012:assumed-role/iam-mutant-WorkerRole-"
        )
        assert "/iam-mutant-Worker-" in denial.message  # the session Lambda names after the function
        assert denial.message.endswith("because no identity-based policy allows the sqs:SendMessage action")
        assert not _forwarded(cloud, "two", timeout=3)


@pytest.mark.timeout(180)
def test_given_record_mode_when_a_call_is_not_allowed_then_it_is_recorded_and_let_through(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLUICE_LOCAL_IAM", "record")
    with LocalCloud(project, stack_name="iam-record") as cloud:
        cloud.iam.without = frozenset({_key(cloud, "ForwardToOut")})
        cloud.client("sqs").send_message(QueueUrl=cloud.outputs["InUrl"], MessageBody="three")
        assert _forwarded(cloud, "three")  # let through
        assert _refused(cloud, "sqs:SendMessage")  # and recorded as AWS would refuse it


def test_given_a_usage_file_when_merged_then_a_statement_is_used_if_any_run_used_it(tmp_path: Path) -> None:
    one = {
        "k": report.StatementUse("k", "S", ["sqs:SendMessage", "sqs:ReceiveMessage"], 2, {"sqs:SendMessage"})
    }
    two = {"k": report.StatementUse("k", "S", ["sqs:SendMessage", "sqs:ReceiveMessage"], 0, set())}
    report.dump(one, tmp_path / "a.json")
    report.dump(two, tmp_path / "b.json")
    merged = report.merge([report.load(tmp_path / "a.json"), report.load(tmp_path / "b.json")])
    assert merged["k"].granted == 2
    assert merged["k"].unused_actions == ["sqs:ReceiveMessage"]
    assert json.loads((tmp_path / "a.json").read_text())[0]["used_actions"] == ["sqs:SendMessage"]


def test_the_iam_report_command_lists_what_no_run_used_and_fails_on_what_is_not_justified(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sluice_local.__main__ import main  # noqa: PLC0415 - the command as `python -m sluice_local` runs it

    used = report.StatementUse(
        "role:<stack>-WorkerRole/worker#ForwardToOut",
        "ForwardToOut",
        ["sqs:SendMessage"],
        3,
        {"sqs:SendMessage"},
    )
    logs = report.StatementUse(
        "role:<stack>-WorkerRole/worker#WriteOwnLogs", "WriteOwnLogs", ["logs:PutLogEvents"]
    )
    stray = report.StatementUse("role:<stack>-WorkerRole/worker#Stray", "Stray", ["sqs:PurgeQueue"])
    report.dump({u.key: u for u in (used, logs, stray)}, tmp_path / "run.json")
    assert main(["iam-report", str(tmp_path / "run.json")]) == 1
    said = capsys.readouterr().out
    assert "1 of 3 Allow statements used" in said
    assert "granted nothing: role:<stack>-WorkerRole/worker#WriteOwnLogs  — the Lambda service writes" in said
    assert "granted nothing: role:<stack>-WorkerRole/worker#Stray  — NOT JUSTIFIED" in said
    assert "1 statements granted nothing and are not justified" in said


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        (("Principal: {Service: lambda.amazonaws.com}", "Principal: {Service: states.amazonaws.com}"),
         "cannot be assumed by lambda.amazonaws.com"),
        (("      Policies:\n        - PolicyName: worker",
          "      ManagedPolicyArns: [arn:aws:iam::123456789012:policy/nobody-made-me]\n"
          "      Policies:\n        - PolicyName: worker"),
         "Policy arn:aws:iam::123456789012:policy/nobody-made-me does not exist or is not attachable"),
    ],
    ids=["a role Lambda may not assume", "a managed policy that does not exist"],
)  # fmt: skip
def test_given_a_role_aws_would_refuse_when_deployed_then_the_stack_fails_as_in_aws(
    project: Path, change: tuple[str, str], refusal: str
) -> None:
    from sluice_local.emulation.cloud import DeployError  # noqa: PLC0415

    template = project / "template.yaml"
    assert change[0] in template.read_text()
    template.write_text(template.read_text().replace(*change))
    with pytest.raises(DeployError, match=refusal):
        LocalCloud(project, stack_name="iam-refused").start()
