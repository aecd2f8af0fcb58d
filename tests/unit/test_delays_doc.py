"""docs/delays.md's snippets for a producer outside the stack ("From a producer outside the stack"): the
``TrustedSenderArns`` override and the producer's IAM statement, held to template.yaml, stacks/delays.yaml
and what ``send_delayed`` calls. (tests/e2e/test_follow_up.py deploys the override and checks the delay
queue's policy admits the producer it lists.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from samtranslator.yaml_helper import yaml_parse

from sluice.delay import send_delayed

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "delays.md"
OVERRIDE = re.compile(r"^sam deploy --parameter-overrides TrustedSenderArns=(\S+)$", re.MULTILINE)


def _blocks(language: str) -> list[str]:
    return re.findall(
        rf"^```{language}\n(.*?)^```$", DOC.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL
    )


def trusted_senders() -> list[str]:
    """The producer ARNs the page's ``sam deploy --parameter-overrides TrustedSenderArns=...`` lists."""
    [value] = [m[1] for block in _blocks("bash") for m in OVERRIDE.finditer(block)]
    return value.split(",")


def producer_statement() -> dict[str, Any]:
    """The statement the page gives a producer's role (Sid AskSluiceForDelays)."""
    [block] = [block for block in _blocks("yaml") if "AskSluiceForDelays" in block]
    [statement] = yaml_parse(block)
    return dict(statement)


def test_the_listed_producer_is_a_value_the_parameter_accepts_and_the_delay_stack_gets() -> None:
    template = yaml_parse((ROOT / "template.yaml").read_text(encoding="utf-8"))
    parameter = template["Parameters"]["TrustedSenderArns"]
    assert parameter["Type"] == "CommaDelimitedList"
    for arn in trusted_senders():
        assert re.fullmatch(parameter["AllowedPattern"], arn), arn
    passed = template["Resources"]["DelayStack"]["Properties"]["Parameters"]["TrustedSenderArns"]
    assert passed == {"Fn::Join": [",", {"Ref": "TrustedSenderArns"}]}


def test_the_producers_statement_allows_sending_to_the_stacks_delay_queue_and_needs_no_key() -> None:
    statement = producer_statement()
    assert (statement["Effect"], statement["Action"]) == ("Allow", "sqs:SendMessage")
    stack = tomllib.loads((ROOT / "samconfig.toml").read_text(encoding="utf-8"))
    stack_name = stack["default"]["global"]["parameters"]["stack_name"]
    queue = yaml_parse((ROOT / "stacks" / "delays.yaml").read_text(encoding="utf-8"))["Resources"][
        "DelayQueue"
    ]
    name = queue["Properties"]["QueueName"]["Fn::Sub"].replace("${StackName}", stack_name)
    arn = "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:" + name
    assert statement["Resource"] == {"Fn::Sub": arn}
    # SQS-managed encryption: a sender needs no KMS permission (a customer managed key would need two)
    assert queue["Properties"].get("SqsManagedSseEnabled") is True
    assert "KmsMasterKeyId" not in queue["Properties"]


class _Recorder:
    """An SQS client that records the calls made on it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(**_: Any) -> dict[str, str]:
            self.calls.append(name)
            return {"MessageId": "m-1"}

        return call


def test_send_delayed_makes_no_call_the_statement_does_not_allow() -> None:
    sqs = _Recorder()
    send_delayed(
        sqs,  # type: ignore[arg-type]
        delay_queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/sluice-dev-delay",
        target="https://sqs.us-east-1.amazonaws.com/123456789012/sluice-dev-Orders-work",
        body="{}",
        delay_seconds=3600,
    )
    assert sqs.calls == ["send_message"]  # sqs:SendMessage, the statement's one action
