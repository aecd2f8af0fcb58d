"""Every file in events/redrive_plan runs through the real Plan handler (moto), as `sam local invoke`
would run it: one Map item of the redrive state machine (the message and the breaker's probe time) → one
plan back; or a send the source refused →
the poison plan that records the refusal."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from sluice.envelope import ATTRIBUTE, Envelope
from sluice.errors import InvalidEventError
from sluice_local.emulation.lambda_loader import LambdaContext, load_handler
from tests.conftest import envelope_key_secret
from tests.doubles import seal_envelopes

from .test_events import emf_metrics

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
ACCOUNT = "123456789012"
WORK_ARN = f"arn:aws:sqs:us-east-1:{ACCOUNT}:sluice-dev-work"
BREAKER_TABLE = "sluice-dev-breaker"
PLANNED = {"BouncingRedrives": 0, "EnvelopesCorrupt": 0}


@dataclass(frozen=True)
class Expected:
    action: str
    attempt: int
    queue: str
    """Destination queue name."""
    error_type: str
    """The last error recorded in the plan's envelope."""
    metrics: dict[str, int] = field(default_factory=lambda: dict(PLANNED))
    breaker: dict[str, str] | None = field(default_factory=lambda: {"seen": "1", "fresh": "0"})
    """Counters the step added to the breaker item (None: it does not touch the breaker)."""


EXPECTED: dict[str, Expected] = {
    "redrive_plan/first-dead-letter.json": Expected(
        "redrive", 1, "sluice-dev-work", "MaxReceiveCountExceeded"
    ),
    "redrive_plan/max-attempts-poison.json": Expected("poison", 6, "sluice-dev-poison", "TransientError"),
    "redrive_plan/foreign-source.json": Expected("poison", 1, "sluice-dev-poison", "RedriveRefused"),
    "redrive_plan/judged-after-probe.json": Expected(
        "redrive", 3, "sluice-dev-work", "TransientError", breaker={"seen": "1", "fresh": "1"}
    ),
    "redrive_plan/send-refused.json": Expected(
        "poison", 2, "sluice-dev-poison", "RedriveRefused", metrics={}, breaker=None
    ),
}


@pytest.fixture
def plan_stack(monkeypatch):
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        urls = {
            name: sqs.create_queue(QueueName=name)["QueueUrl"]
            for name in ("sluice-dev-work", "sluice-dev-poison")
        }
        dlq = sqs.create_queue(QueueName="sluice-dev-work-dlq")["QueueUrl"]
        ddb.create_table(
            TableName=BREAKER_TABLE,
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        for name, value in {
            "SLUICE_BREAKER_TABLE": BREAKER_TABLE,
            "SLUICE_DEAD_LETTER_QUEUE_URL": dlq,
            "SLUICE_POISON_QUEUE_URL": urls["sluice-dev-poison"],
            "SLUICE_ENVELOPE_KEY_SECRET": envelope_key_secret(),
            "SLUICE_SOURCE_QUEUE_ARN": WORK_ARN,
            "SLUICE_REDRIVE_MAX_ATTEMPTS": "5",
        }.items():
            monkeypatch.setenv(name, value)
        yield ddb, urls


@pytest.mark.parametrize("event_file", sorted(EXPECTED))
def test_redrive_plan_event_runs_through_its_handler(plan_stack, capsys, event_file):
    ddb, urls = plan_stack
    event = seal_envelopes(json.loads((EVENTS / event_file).read_text()))  # as sluice wrote them
    refused = event.get("refused")
    message = refused["plan"] if refused else event["message"]
    handler = load_handler(ROOT / "functions" / "redrive_plan", "app.lambda_handler")
    capsys.readouterr()

    plan = handler(event, LambdaContext(function_name="sluice-dev-RedrivePlanFunction"))

    expected = EXPECTED[event_file]
    assert plan["action"] == expected.action
    assert plan["attempt"] == expected.attempt
    assert plan["queueUrl"] == urls[expected.queue]
    assert plan["messageId"] == message.get("MessageId", message.get("messageId"))
    assert plan["receiptHandle"] == message.get("ReceiptHandle", message.get("receiptHandle"))
    assert plan["body"] == message.get("Body", message.get("body"))
    for name, value in message.get("MessageAttributes", message.get("messageAttributes")).items():
        if name != ATTRIBUTE:
            assert plan["messageAttributes"][name] == value
    envelope = Envelope.model_validate_json(plan["messageAttributes"][ATTRIBUTE]["StringValue"])
    assert envelope.attempts == expected.attempt
    assert envelope.last_error is not None
    assert envelope.last_error.type == expected.error_type
    if expected.action == "redrive":
        assert plan["delaySeconds"] == plan["sendDelaySeconds"] + plan["waitSeconds"]
        assert plan["delaySeconds"] >= 1
        assert plan["sendDelaySeconds"] <= 900
    else:
        assert plan["delaySeconds"] == plan["sendDelaySeconds"] == plan["waitSeconds"] == 0
    if refused:
        assert envelope.last_error.message.startswith(f"{refused['plan']['queueUrl']} refused the message: ")
        assert plan["reason"].startswith("the source queue refused the message: InvalidMessageContents: ")
    seen = emf_metrics(capsys.readouterr().out)
    for name, value in expected.metrics.items():
        assert name in seen, f"{name} not emitted for {event_file}"
        assert seen[name] == value, f"{name}: expected {value}, saw {seen[name]} in {event_file}"
    item = ddb.get_item(TableName=BREAKER_TABLE, Key={"id": {"S": "redrive"}}).get("Item")
    if expected.breaker is None:
        assert item is None
    else:
        assert item is not None
        for counter, value in expected.breaker.items():
            assert item[counter] == {"N": value}, f"breaker {counter} in {event_file}"
        if expected.action == "redrive":
            assert "latest_due" in item


def test_a_bare_message_is_refused_with_the_shape_the_step_expects(plan_stack):
    # Given a ReceiveMessage message passed without its Map item wrapper
    ddb, _ = plan_stack
    bare = json.loads((EVENTS / "redrive_plan/first-dead-letter.json").read_text())["message"]
    handler = load_handler(ROOT / "functions" / "redrive_plan", "app.lambda_handler")

    # When the Plan step runs it, Then it names the shape it expected and plans nothing
    with pytest.raises(InvalidEventError, match=r'expects \{"message": .*got \[.*MessageId'):
        handler(bare, LambdaContext(function_name="sluice-dev-RedrivePlanFunction"))
    assert "Item" not in ddb.get_item(TableName=BREAKER_TABLE, Key={"id": {"S": "redrive"}})


def test_given_a_forged_envelope_when_planned_then_its_bookkeeping_neither_poisons_nor_counts_as_bouncing(
    plan_stack, capsys
):
    # Given the max-attempts event as a producer would forge it: no seal on its bookkeeping
    ddb, _ = plan_stack
    event = json.loads((EVENTS / "redrive_plan/max-attempts-poison.json").read_text())
    forged = json.loads(event["message"]["MessageAttributes"][ATTRIBUTE]["StringValue"])
    forged["redriven_at"] = "2099-01-01T00:00:00Z"  # "re-driven moments ago and back"
    event["message"]["MessageAttributes"][ATTRIBUTE]["StringValue"] = json.dumps(forged)
    handler = load_handler(ROOT / "functions" / "redrive_plan", "app.lambda_handler")
    capsys.readouterr()

    # When the Plan step (Step Functions mode) plans it
    plan = handler(event, LambdaContext(function_name="sluice-dev-RedrivePlanFunction"))

    # Then it is a first redrive, not bouncing, and the forgery is counted (the warning with the message
    # id is the redriver's too: tests/functional/test_redriver.py)
    assert forged["attempts"] >= 5
    assert (plan["action"], plan["attempt"], plan["bouncing"]) == ("redrive", 1, False)
    assert emf_metrics(capsys.readouterr().out)["EnvelopesCorrupt"] == 1
    item = ddb.get_item(TableName=BREAKER_TABLE, Key={"id": {"S": "redrive"}})["Item"]
    assert item["bouncing"] == {"N": "0"}
