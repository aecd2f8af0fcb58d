"""What a Lambda function of yours receives, built in a test: SQS records and events, a context.

A record is made the way the local runtime's event source mappings make one from a message really
received (:func:`sluice_local.emulation.sqs_events.to_lambda_record`): one shape, whichever way a
test reaches your handler.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from sluice_local.emulation.lambda_loader import LambdaContext

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext as PowertoolsContext
from sluice_local.emulation.sqs_events import to_lambda_record

__all__ = ["QUEUE_ARN", "lambda_context", "sqs_event", "sqs_record"]

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:sluice-test-work"
"""The queue a record says it came from, unless a test names another."""


def _attribute(value: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(value, bytes):
        return {"DataType": "Binary", "BinaryValue": value}
    if isinstance(value, str):
        return {"DataType": "String", "StringValue": value}
    return dict(value)  # already as SQS's API writes it: {"DataType": ..., "StringValue": ...}


def sqs_record(
    body: str | Mapping[str, Any] | list[Any] = "{}",
    *,
    message_id: str | None = None,
    attributes: Mapping[str, str | bytes | Mapping[str, Any]] | None = None,
    receive_count: int | str = 1,
    sent_at: datetime | None = None,
    queue_arn: str = QUEUE_ARN,
    system: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One record of a Lambda SQS event.

    ``body``: text, or a mapping or list sent as its JSON; ``attributes``: the message attributes, a
    str as String, bytes as Binary, or a mapping as SQS's API writes one (``{"DataType": "Number",
    "StringValue": "3"}``); ``receive_count``: ``ApproximateReceiveCount`` (a str passes through as
    it is, for a test of a garbled one); ``system``: more system attributes (``MessageGroupId``, ...).
    """
    mid = message_id or str(uuid.uuid4())
    sent = sent_at or datetime.now(UTC)
    message: dict[str, Any] = {
        "MessageId": mid,
        "ReceiptHandle": f"rh-{mid}",
        "Body": body if isinstance(body, str) else json.dumps(body),
        "Attributes": {
            "ApproximateReceiveCount": str(receive_count),
            "SentTimestamp": str(int(sent.timestamp() * 1000)),
            "ApproximateFirstReceiveTimestamp": str(int(sent.timestamp() * 1000)),
            **(system or {}),
        },
        "MessageAttributes": {name: _attribute(value) for name, value in (attributes or {}).items()},
    }
    return to_lambda_record(message, queue_arn, region=queue_arn.split(":")[3])


def sqs_event(*items: dict[str, Any] | str | Mapping[str, Any]) -> dict[str, Any]:
    """A Lambda SQS event: each item a record (:func:`sqs_record`), or a body made into one."""
    records = [
        item if isinstance(item, dict) and "eventSource" in item else sqs_record(item) for item in items
    ]
    return {"Records": records}


def lambda_context(function_name: str = "sluice-test", *, timeout_seconds: float = 30.0) -> PowertoolsContext:
    """A Lambda context whose remaining time counts down from ``timeout_seconds`` (as the runtime's).
    Typed as Powertools' ``LambdaContext``, the type a handler declares (a type checker accepts it
    where your handler or ``Consumer.handle`` takes one)."""
    context = LambdaContext(function_name=function_name, timeout_seconds=timeout_seconds)
    return cast("PowertoolsContext", context)
