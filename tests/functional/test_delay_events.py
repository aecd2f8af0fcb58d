"""Every file in events/batch_delay and events/rehydrator runs through its real handler (moto)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from sluice.delay.schedule import Parked, encode_object
from sluice.envelope import ATTRIBUTE, Envelope
from sluice_local.emulation.lambda_loader import LambdaContext, load_handler
from tests.conftest import create_waiting_state_machine, envelope_key_secret

from .test_events import emf_metrics

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
SENT = datetime.fromtimestamp(1795860000, tz=UTC)  # the events' SentTimestamp
WORK = "https://sqs.us-east-1.amazonaws.com/123456789012/sluice-dev-work"

# file → metrics that must be seen (and, for batch-delay, the poison count)
EXPECTED: dict[str, dict[str, int]] = {
    "batch_delay/due-soon.json": {"MessagesSentDirect": 1, "MessagesDelayed": 0, "RecordsIsolated": 0},
    "batch_delay/due-in-3-hours.json": {"MessagesDelayed": 2, "DelayBucketsStarted": 1, "RecordsIsolated": 0},
    "batch_delay/mixed-batch.json": {
        "MessagesSentDirect": 1,
        "MessagesDelayed": 2,
        "DelayBucketsStarted": 2,
        "RecordsIsolated": 2,
    },
    "rehydrator/bucket.json": {"MessagesRehydrated": 1, "DelayedObjectsSwept": 0},
    "rehydrator/sweep.json": {"MessagesRehydrated": 1, "DelayedObjectsSwept": 1},
}


@pytest.fixture
def delay_stack(monkeypatch):
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        s3 = boto3.client("s3", region_name="us-east-1")
        sfn = boto3.client("stepfunctions", region_name="us-east-1")
        iam = boto3.client("iam", region_name="us-east-1")
        for name in ("sluice-dev-work", "sluice-dev-delay"):
            sqs.create_queue(QueueName=name)
        poison = sqs.create_queue(QueueName="sluice-dev-poison")["QueueUrl"]
        s3.create_bucket(Bucket="sluice-dev-delaybucket-example")
        machine = create_waiting_state_machine(sfn, iam, "sluice-dev-delay")
        for name, value in {
            "SLUICE_DELAY_BUCKET": "sluice-dev-delaybucket-example",
            "SLUICE_DELAY_STATE_MACHINE_ARN": machine,
            "SLUICE_DELAY_TARGETS": WORK,
            "SLUICE_POISON_QUEUE_URL": poison,
            "SLUICE_ENVELOPE_KEY_SECRET": envelope_key_secret(),
        }.items():
            monkeypatch.setenv(name, value)
        yield sqs, s3, poison


def shifted(event: dict, now: datetime) -> dict:
    """Move every deliver_at by whole minutes so the events' send time becomes the next minute start,
    as a person invoking by hand would (whole minutes keep due times in the buckets the files intend)."""
    minutes = -(-int((now - SENT).total_seconds()) // 60)
    for record in event.get("Records", []):
        attribute = record["messageAttributes"][ATTRIBUTE]
        env = Envelope.model_validate_json(attribute["stringValue"])
        assert env.deliver_at is not None
        env = env.model_copy(update={"deliver_at": env.deliver_at + timedelta(minutes=minutes)})
        attribute["stringValue"] = env.to_json()
    return event


@pytest.mark.parametrize("event_file", sorted(EXPECTED))
def test_delay_event_runs_through_its_handler(delay_stack, capsys, event_file):
    sqs, s3, poison = delay_stack
    function, _ = event_file.split("/")
    now = datetime.now(UTC)
    event = json.loads((EVENTS / event_file).read_text())
    if function == "rehydrator":
        bucket = event.get("bucket") or int((now - timedelta(hours=1)).timestamp()) // 60 * 60
        parked = Parked("m-1", WORK, now - timedelta(seconds=1), '{"order_id": "ord-r1"}', {})
        s3.put_object(
            Bucket="sluice-dev-delaybucket-example",
            Key=f"delayed/{bucket}/x.json",
            Body=encode_object(bucket, [parked]),
        )
    else:
        event = shifted(event, now)
    handler = load_handler(ROOT / "functions" / function, "app.lambda_handler")
    capsys.readouterr()

    response = handler(event, LambdaContext(function_name=f"sluice-dev-{function}"))

    seen = emf_metrics(capsys.readouterr().out)
    for name, value in EXPECTED[event_file].items():
        assert seen.get(name, 0) == value, (
            f"{name}: expected {value}, saw {seen.get(name, 0)} in {event_file}"
        )
    if function == "batch_delay":
        assert response == {"batchItemFailures": []}
        poisoned = sqs.receive_message(QueueUrl=poison, MaxNumberOfMessages=10).get("Messages", [])
        assert len(poisoned) == EXPECTED[event_file]["RecordsIsolated"]
    else:
        assert response["more"] is False
