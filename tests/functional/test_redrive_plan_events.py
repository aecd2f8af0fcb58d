"""Every file in events/redrive_plan runs through the real Plan handler (moto), as `sam local invoke`
would run it: one message as the redrive state machine's Map passes it, one plan back."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from sluice.envelope import ATTRIBUTE, Envelope
from sluice_local.lambda_loader import LambdaContext, load_handler

from .test_events import emf_metrics

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
ACCOUNT = "123456789012"
WORK_ARN = f"arn:aws:sqs:us-east-1:{ACCOUNT}:sluice-dev-work"
BREAKER_TABLE = "sluice-dev-breaker"

# file → (action, attempt, destination queue name, error type recorded in the envelope, metrics)
EXPECTED: dict[str, tuple[str, int, str, str, dict[str, int]]] = {
    "redrive_plan/first-dead-letter.json": (
        "redrive",
        1,
        "sluice-dev-work",
        "MaxReceiveCountExceeded",
        {"BouncingRedrives": 0, "EnvelopesCorrupt": 0},
    ),
    "redrive_plan/max-attempts-poison.json": (
        "poison",
        6,
        "sluice-dev-poison",
        "TransientError",
        {"BouncingRedrives": 0, "EnvelopesCorrupt": 0},
    ),
    "redrive_plan/foreign-source.json": (
        "poison",
        1,
        "sluice-dev-poison",
        "RedriveRefused",
        {"BouncingRedrives": 0, "EnvelopesCorrupt": 0},
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
            "SLUICE_SOURCE_QUEUE_ARN": WORK_ARN,
            "SLUICE_REDRIVE_MAX_ATTEMPTS": "5",
        }.items():
            monkeypatch.setenv(name, value)
        yield ddb, urls


@pytest.mark.parametrize("event_file", sorted(EXPECTED))
def test_redrive_plan_event_runs_through_its_handler(plan_stack, capsys, event_file):
    ddb, urls = plan_stack
    event = json.loads((EVENTS / event_file).read_text())
    handler = load_handler(ROOT / "functions" / "redrive_plan", "app.lambda_handler")
    capsys.readouterr()

    plan = handler(event, LambdaContext(function_name="sluice-dev-RedrivePlanFunction"))

    action, attempt, queue, error_type, metric_expectations = EXPECTED[event_file]
    assert plan["action"] == action
    assert plan["attempt"] == attempt
    assert plan["queueUrl"] == urls[queue]
    assert plan["messageId"] == event["MessageId"]
    assert plan["receiptHandle"] == event["ReceiptHandle"]
    assert plan["body"] == event["Body"]
    for name, value in event["MessageAttributes"].items():
        if name != ATTRIBUTE:
            assert plan["messageAttributes"][name] == value
    envelope = Envelope.model_validate_json(plan["messageAttributes"][ATTRIBUTE]["StringValue"])
    assert envelope.attempts == attempt
    assert envelope.last_error is not None
    assert envelope.last_error.type == error_type
    if action == "redrive":
        assert 1 <= plan["delaySeconds"] < plan["holdSeconds"]
    seen = emf_metrics(capsys.readouterr().out)
    for name, value in metric_expectations.items():
        assert name in seen, f"{name} not emitted for {event_file}"
        assert seen[name] == value, f"{name}: expected {value}, saw {seen[name]} in {event_file}"
    breaker = ddb.get_item(TableName=BREAKER_TABLE, Key={"id": {"S": "redrive"}})["Item"]
    assert breaker["seen"] == {"N": "1"}
