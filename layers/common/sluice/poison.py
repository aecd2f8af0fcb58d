"""Poison-pill isolation: move a message that cannot succeed to the poison queue, with forensics.

The poison message keeps the original body (or its claim-check pointer) and the user's attributes
untouched; the sluice envelope records attempts, first failure, last error (class, short message,
time, receive count), source queue, trace context and the original message id, so an engineer can
fix and replay it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.envelope import Envelope, SendAttributes, merge

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


def isolate(
    sqs: SQSClient,
    *,
    poison_queue_url: str,
    body: str,
    attributes: SendAttributes,
    envelope: Envelope,
) -> str:
    """Send to the poison queue; returns the poison message id. Raises if SQS refuses it."""
    response = sqs.send_message(
        QueueUrl=poison_queue_url,
        MessageBody=body,
        MessageAttributes=merge(attributes, envelope),  # type: ignore[arg-type]
    )
    return response["MessageId"]
