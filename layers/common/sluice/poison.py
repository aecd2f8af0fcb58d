"""Poison-pill isolation: move a message that cannot succeed to the poison queue, with forensics.

The poison message keeps the original body (or its claim-check pointer, or a new pointer when the
body no longer fits beside the envelope) and the user's attributes untouched (any SQS would refuse
kept inside the envelope with the reason); the sluice envelope records attempts, first failure,
last error (class, short message, time, receive count), source queue, trace context and the
original message id, so an engineer can fix and replay it. A message with a group id (its fair-queue
tenant, the envelope's ``group``) keeps it as the poison message's ``MessageGroupId`` too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.envelope import Envelope, Seal, SendAttributes
from sluice.fit import Offload, fit
from sluice.groups import group_param
from sluice.tracing import system_attributes

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


def isolate(
    sqs: SQSClient,
    *,
    poison_queue_url: str,
    body: str,
    attributes: SendAttributes,
    envelope: Envelope,
    seal: Seal | None,
    offload: Offload | None = None,
) -> str:
    """Send to the poison queue; returns the poison message id.

    The message is made acceptable to SQS first (:func:`sluice.fit.fit` with quarantine: attributes
    SQS refuses travel inside the envelope, a body too large with the envelope is offloaded through
    ``offload``). Raises :class:`~sluice.fit.UnfittableError` when nothing makes it fit, or whatever SQS
    raises: the caller keeps the message (retry, dead-letter queue), never drops it.
    """
    fitted = fit(body, attributes, envelope, seal=seal, quarantine=True, offload=offload)
    response = sqs.send_message(
        QueueUrl=poison_queue_url,
        MessageBody=fitted.body,
        MessageAttributes=fitted.attributes,  # type: ignore[arg-type]
        MessageSystemAttributes=system_attributes(envelope.trace),  # type: ignore[arg-type]
        **group_param(envelope.group),  # type: ignore[arg-type]
    )
    return response["MessageId"]
