"""Lambda SQS events from messages really received from a queue (local runtime pollers and tests).

Receiving for real gives genuine receipt handles and receive counts, so visibility changes,
heartbeats and backoff are exercised against the queue exactly as the event source mapping does.
"""

from __future__ import annotations

import base64
import time
from typing import Any


def to_lambda_record(message: dict[str, Any], queue_arn: str, region: str = "us-east-1") -> dict[str, Any]:
    attributes = {}
    for name, value in (message.get("MessageAttributes") or {}).items():
        item: dict[str, Any] = {"dataType": value["DataType"], "stringListValues": [], "binaryListValues": []}
        if "BinaryValue" in value:
            item["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode()
        else:
            item["stringValue"] = value.get("StringValue")
        attributes[name] = item
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes") or {}),
        "messageAttributes": attributes,
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


def receive_event(
    sqs: Any, queue_url: str, queue_arn: str, count: int, *, timeout: float = 5.0
) -> dict[str, Any]:
    """Receive exactly ``count`` messages (polling until they are all visible) as one Lambda event."""
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(records) < count and time.monotonic() < deadline:
        got = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=min(10, count - len(records)),
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
            WaitTimeSeconds=0,
        ).get("Messages", [])
        records.extend(to_lambda_record(m, queue_arn) for m in got)
        if not got:
            time.sleep(0.05)
    if len(records) != count:
        raise AssertionError(f"expected {count} messages on {queue_url}, received {len(records)}")
    return {"Records": records}


def drain(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    """Every message currently visible on the queue (received, not deleted)."""
    out: list[dict[str, Any]] = []
    while True:
        got = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
            WaitTimeSeconds=0,
        ).get("Messages", [])
        if not got:
            return out
        out.extend(got)
