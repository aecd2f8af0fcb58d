"""Poison-pill isolation: move a message that cannot succeed to the poison queue, with forensics.

The poison message keeps the original body (or its claim-check pointer) and the user's attributes
untouched; the sluice envelope records attempts, first failure, last error (class, short message,
time, receive count), source queue, trace context and the original message id, so an engineer can
fix and replay it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import Field

from sluice.envelope import Envelope, ErrorInfo, SendAttributes, from_event_attributes, merge, split, utcnow
from sluice.errors import PermanentError
from sluice.settings import EnvSettings

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


class IsolatorSettings(EnvSettings):
    """Settings of the poison-pill isolator Lambda (``SLUICE_POISON_QUEUE_URL``)."""

    poison_queue_url: str = Field(pattern=r"^https?://")


def isolate_request(
    sqs: SQSClient, *, poison_queue_url: str, request: Mapping[str, Any]
) -> tuple[str, Envelope]:
    """The isolator Lambda's work: ``request`` is a redrive plan (``Decision.to_state()``) or any
    ``{"body", "messageAttributes", "reason"?, "messageId"?}``. Returns (poison message id, envelope).

    The destination is always ``poison_queue_url`` (never a queue named in the request). A request
    without a sluice envelope gets one recording ``reason``, so no poison message lacks forensics.
    """
    body = request.get("body")
    if not isinstance(body, str):
        raise PermanentError("isolation request has no string 'body'")
    raw = request.get("messageAttributes") or {}
    if not isinstance(raw, Mapping):
        raise PermanentError("isolation request 'messageAttributes' must be an object")
    user, envelope, _ = split(from_event_attributes(dict(raw)))
    if envelope is None or envelope.last_error is None:
        reason = str(request.get("reason") or "isolated without a recorded reason")
        message_id = request.get("messageId")
        base = envelope or Envelope(origin_id=None if message_id is None else str(message_id))
        now = utcnow()
        envelope = base.recording(
            ErrorInfo.of(PermanentError.__name__, reason, at=now), attempts=max(base.attempts, 1)
        )
    return isolate(
        sqs, poison_queue_url=poison_queue_url, body=body, attributes=user, envelope=envelope
    ), envelope
