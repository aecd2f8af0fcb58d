"""IAM as the local runtime enforces it, through the real template: who may send where.

The session stack lists its producer in ``TrustedSenderArns`` and its operator in ``OperatorArns``
(:class:`sluice_local.app.principals.Principals`); these tests add principals the stack does not list,
as a team's other roles would be, and check that SQS answers each as it does in AWS.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sluice.delay import send_delayed
from sluice_local.app.observer import Stack
from sluice_local.app.principals import OPERATOR, PRODUCER
from sluice_local.emulation.endpoint import endpoint_client
from tests.waiting import wait_for

ACCOUNT = "123456789012"


def _role(stack: Stack, statements: list[dict[str, Any]]) -> dict[str, str]:
    """A new role of the account (not listed anywhere) with ``statements``; its session's credentials."""
    iam, name = stack.client("iam"), f"outsider-{uuid.uuid4().hex[:8]}"
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    iam.put_role_policy(
        RoleName=name,
        PolicyName="own",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}),
    )
    creds = stack.client("sts").assume_role(RoleArn=arn, RoleSessionName="iam-test")["Credentials"]
    return {
        "AWS_ACCESS_KEY_ID": creds["AccessKeyId"],
        "AWS_SECRET_ACCESS_KEY": creds["SecretAccessKey"],
        "AWS_SESSION_TOKEN": creds["SessionToken"],
    }


def _sqs_as(stack: Stack, credentials: dict[str, str]) -> Any:
    return endpoint_client("sqs", stack.endpoint, stack.region, credentials)


def _denied(call: Any) -> str:
    with pytest.raises(ClientError) as caught:
        call()
    error = caught.value.response["Error"]
    assert error["Code"] == "AccessDenied", error
    return str(error["Message"])


SEND_ANYWHERE = [{"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": "*"}]


def test_given_a_producer_not_in_trusted_senders_when_it_asks_for_a_delay_then_the_delay_queue_refuses_it(
    stack: Stack,
) -> None:
    # Given a role allowed to send anywhere by its own policy, but not listed in TrustedSenderArns
    outsider = _sqs_as(stack, _role(stack, SEND_ANYWHERE))
    # When it calls send_delayed
    message = _denied(
        lambda: send_delayed(
            outsider,
            delay_queue_url=stack.outputs["DelayQueueUrl"],
            target=stack.outputs["OrdersQueueUrl"],
            body="{}",
            delay_seconds=3600,
        )
    )
    # Then SQS refuses it with AWS's message, naming the action, the queue and the queue policy's deny
    delay_arn = f"arn:aws:sqs:{stack.region}:{ACCOUNT}:{stack.outputs['DelayQueueUrl'].rsplit('/', 1)[-1]}"
    assert "is not authorized to perform: sqs:SendMessage on resource: " + delay_arn in message
    assert "with an explicit deny in a resource-based policy" in message
    # and the producer the stack lists is let through
    assert send_delayed(
        stack.client("sqs", PRODUCER),
        delay_queue_url=stack.outputs["DelayQueueUrl"],
        target=stack.outputs["OrdersQueueUrl"],
        body=json.dumps({"iam-test": uuid.uuid4().hex}),
        delay_seconds=3600,  # parked for an hour: nothing of it reaches the work queue in this session
    )


def test_given_a_role_without_an_identity_policy_for_sqs_when_it_sends_then_it_is_refused(
    stack: Stack,
) -> None:
    # Given a role whose own policy allows nothing on SQS
    nobody = _sqs_as(
        stack, _role(stack, [{"Effect": "Allow", "Action": "s3:ListAllMyBuckets", "Resource": "*"}])
    )
    # When it sends to a work queue (whose policy grants nobody anything)
    message = _denied(lambda: nobody.send_message(QueueUrl=stack.outputs["OrdersQueueUrl"], MessageBody="{}"))
    # Then the refusal says no identity-based policy allows it
    assert "because no identity-based policy allows the sqs:SendMessage action" in message


def test_given_the_poison_queue_when_the_producer_or_the_operator_sends_then_only_the_operator_may(
    stack: Stack,
) -> None:
    url = stack.outputs["PoisonPillQueueUrl"]
    body = json.dumps({"iam-test": uuid.uuid4().hex})
    # Given the producer (a trusted sender, not an operator): refused by the queue's policy
    message = _denied(lambda: stack.client("sqs", PRODUCER).send_message(QueueUrl=url, MessageBody=body))
    assert "with an explicit deny in a resource-based policy" in message
    # When the operator isolates a message by hand: accepted (OperatorArns)
    stack.client("sqs", OPERATOR).send_message(QueueUrl=url, MessageBody=body)
    # (taken out again: the session's other tests count what the poison queue holds of theirs)
    for found in stack.every_message("PoisonPillQueueUrl"):
        if found["Body"] == body:
            stack.client("sqs").delete_message(QueueUrl=url, ReceiptHandle=found["ReceiptHandle"])
            break
    else:
        pytest.fail("the operator's message is not in the poison queue")


def test_the_mutation_run_at_smoke_size_refuses_the_scenario_without_a_statement_it_needs(
    tmp_path: Path,
) -> None:
    # `python -m sluice_local mutation` (docs/local.md): one scenario's baseline, one statement taken out
    out = tmp_path / "mutation.json"
    done = subprocess.run(
        [sys.executable, "-m", "sluice_local", "mutation", "--scenario", "normal", "--limit", "1",
         "--workers", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    [baseline] = result["baseline"]
    assert baseline["ok"]
    assert not baseline["denied"]
    assert baseline["statements"]
    [mutant] = result["mutants"]
    assert mutant["killed"]
    assert "is not authorized to perform" in mutant["refused"]
    assert "statements taken out one at a time: 1 refused with AccessDenied, 0 not" in done.stdout


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def _cli_as(stack: Stack, who: str, *args: str) -> Ran:
    """The operator CLI, in this process, as ``who`` (the credentials `up` prints): its clients read the
    environment when it makes them, as the command line's do."""
    from sluice_cli.__main__ import main  # noqa: PLC0415

    env = {**stack.credentials[who], "AWS_ENDPOINT_URL": stack.endpoint, "AWS_DEFAULT_REGION": stack.region}
    saved = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    stack_name = stack.outputs["DelayQueueUrl"].rsplit("/", 1)[-1].removesuffix("-delay")
    out, err = io.StringIO(), io.StringIO()
    try:
        for key in saved:
            del os.environ[key]
        os.environ.update(env)
        code = main(["--stack-name", stack_name, *args], stdout=out, stderr=err)
    finally:
        for key in env:
            os.environ.pop(key, None)
        os.environ.update(saved)
    return Ran(code, out.getvalue(), err.getvalue())


def test_given_the_operator_credentials_when_the_cli_runs_the_runbook_then_iam_lets_every_step_through(
    stack: Stack,
) -> None:
    # Given the operator (OperatorArns, the permissions docs/operations.md lists), the runbook's steps:
    for args in (
        ("--workload", "Orders", "dlq", "stats"),
        ("poison", "list"),
        ("--workload", "Orders", "breaker", "open", "--reason", "iam e2e"),
        ("--workload", "Orders", "breaker", "close", "--reason", "iam e2e done"),
    ):
        done = _cli_as(stack, OPERATOR, *args)
        assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
        assert "AccessDenied" not in done.stdout + done.stderr

    # and a redrive (it takes the workload's run lease: a scheduled run may hold it for a moment)
    def redrive() -> Ran | None:
        ran = _cli_as(stack, OPERATOR, "--workload", "Orders", "dlq", "redrive")
        return None if ran.returncode != 0 and "another" in ran.stdout + ran.stderr else ran

    redriven: Ran = wait_for(redrive, "the run lease free for the operator's redrive", 90, every=1.0)
    said = redriven.stdout + redriven.stderr
    assert redriven.returncode == 0, said[-3000:]
    assert "AccessDenied" not in said
    # while the producer, not an operator, may not touch the breaker
    refused = _cli_as(stack, PRODUCER, "--workload", "Orders", "breaker", "open", "--reason", "not mine")
    assert refused.returncode != 0
    assert "AccessDenied" in refused.stdout + refused.stderr  # it may not even read the stack
