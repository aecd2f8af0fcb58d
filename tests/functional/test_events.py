"""Every file in events/ runs through its real handler, as `sam local invoke` would run it.

The handler module is loaded the way the Lambda runtime loads it (code dir first on the path, a
fresh cold start per test) against in-process AWS (moto) holding the resources the events name.
Outcomes are read from the handler's response and from the EMF metrics it prints.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from sluice_local.emulation.lambda_loader import LambdaContext, load_handler
from sluice_local.testing.direct import create_idempotency_table
from tests.conftest import create_ledger_table, envelope_key_secret
from tests.doubles import seal_envelopes

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
BUCKET = "sluice-dev-claimcheckbucket-example"
EXTENDED_SIZE = 300_123

# file → (failed item ids, metric values that must be seen)
EXPECTED: dict[str, tuple[set[str], dict[str, int]]] = {
    "orders/normal.json": (set(), {"RecordsProcessed": 1, "RecordsIsolated": 0}),
    "orders/duplicate.json": (set(), {"RecordsProcessed": 1, "DuplicatesSkipped": 1}),
    "orders/poison-bad-json.json": (set(), {"RecordsIsolated": 1, "RecordsProcessed": 0}),
    "orders/permanent-business-failure.json": (set(), {"RecordsIsolated": 1}),
    "orders/claim-check-extended.json": (set(), {"RecordsProcessed": 1, "ClaimChecksResolved": 1}),
    "orders/claim-check-simple.json": (set(), {"RecordsProcessed": 1, "ClaimChecksResolved": 1}),
    "orders/claim-check-foreign-bucket.json": (set(), {"RecordsIsolated": 1, "ClaimChecksResolved": 0}),
    "orders/mixed-batch.json": (
        set(),
        {
            "RecordsProcessed": 5,  # 2001, 2004, 2005, extended, simple
            "DuplicatesSkipped": 1,  # 2001 again
            "RecordsIsolated": 4,  # not json, over limit, foreign bucket, JPY
            "ClaimChecksResolved": 2,
            "NearDeadLetter": 1,  # receive count 4 of 5
        },
    ),
}

ALL_EVENT_FILES = sorted(str(p.relative_to(EVENTS)) for p in EVENTS.rglob("*.json"))


def test_every_event_file_has_an_expectation():
    """This module's EXPECTED plus the EXPECTED of every other tests/functional/test_*_events.py."""
    expected = list(EXPECTED)
    for module in sorted(Path(__file__).parent.glob("test_*_events.py")):
        expected += importlib.import_module(f"{__package__}.{module.stem}").EXPECTED
    assert sorted(expected) == ALL_EVENT_FILES


def emf_metrics(stdout: str) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in stdout.splitlines():
        if not line.startswith("{") or '"_aws"' not in line:
            continue
        doc = json.loads(line)
        for directive in doc["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                raw = doc[metric["Name"]]
                total = sum(raw) if isinstance(raw, list) else raw
                values[metric["Name"]] = values.get(metric["Name"], 0) + int(total)
    return values


@pytest.fixture
def consumer_stack(monkeypatch):
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        s3 = boto3.client("s3", region_name="us-east-1")
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        sqs.create_queue(QueueName="sluice-dev-work")
        poison = sqs.create_queue(QueueName="sluice-dev-poison")["QueueUrl"]
        create_idempotency_table(ddb, "sluice-dev-idempotency")
        create_ledger_table(ddb, "sluice-dev-ledger")
        s3.create_bucket(Bucket=BUCKET)
        large = {"order_id": "ord-3001", "customer_id": "cust-7", "amount_cents": 4200, "currency": "USD"}
        large["note"] = ""
        large["note"] = "x" * (EXTENDED_SIZE - len(json.dumps(large)))
        s3.put_object(Bucket=BUCKET, Key="claim-check/3f1c9a2e-large-order", Body=json.dumps(large).encode())
        simple = {"order_id": "ord-3002", "customer_id": "cust-8", "amount_cents": 990, "currency": "GBP"}
        s3.put_object(Bucket=BUCKET, Key="claim-check/7d2b-simple-order", Body=json.dumps(simple).encode())
        s3.create_bucket(Bucket="attacker-controlled-bucket")
        s3.put_object(
            Bucket="attacker-controlled-bucket", Key="claim-check/steal-me", Body=json.dumps(simple).encode()
        )
        for name, value in {
            "AWS_LAMBDA_FUNCTION_NAME": "sluice-dev-ConsumerFunction",
            "SLUICE_IDEMPOTENCY_TABLE": "sluice-dev-idempotency",
            "SLUICE_POISON_QUEUE_URL": poison,
            "SLUICE_ENVELOPE_KEY_SECRET": envelope_key_secret(),
            "SLUICE_CLAIM_CHECK_BUCKETS": BUCKET,
            "SLUICE_CLAIM_CHECK_PREFIX": "claim-check/",
            "SLUICE_IDEMPOTENCY_KEY_JMESPATH": "order_id",
            "SLUICE_MAX_RECEIVE_COUNT": "5",
            "LEDGER_TABLE_NAME": "sluice-dev-ledger",
        }.items():
            monkeypatch.setenv(name, value)
        yield sqs, poison


@pytest.mark.parametrize("event_file", sorted(EXPECTED))
def test_event_runs_through_its_handler(consumer_stack, capsys, event_file):
    sqs, poison = consumer_stack
    function = event_file.split("/")[0]
    folder = ROOT / "functions" / function  # a sluice function, else an example workload's consumer
    handler = load_handler(folder if folder.is_dir() else ROOT / "examples" / function, "app.lambda_handler")
    event = seal_envelopes(json.loads((EVENTS / event_file).read_text()))  # as sluice wrote them
    capsys.readouterr()

    response = handler(event, LambdaContext(function_name="sluice-dev-ConsumerFunction"))

    failed, metric_expectations = EXPECTED[event_file]
    assert {f["itemIdentifier"] for f in response["batchItemFailures"]} == failed
    seen = emf_metrics(capsys.readouterr().out)
    for name, value in metric_expectations.items():
        assert seen.get(name, 0) == value, (
            f"{name}: expected {value}, saw {seen.get(name, 0)} in {event_file}"
        )
    isolated = metric_expectations.get("RecordsIsolated", 0)
    poisoned = sqs.receive_message(QueueUrl=poison, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
    assert len(poisoned.get("Messages", [])) == isolated
