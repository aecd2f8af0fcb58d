"""The poison-pill isolator Lambda's work: one isolation request of the redrive state machine.

The consumer and the redriver isolate in-process with :func:`sluice.poison.isolate`; this module
keeps the isolator's own settings out of every other function's cold start.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import Field

from sluice.envelope import Envelope, ErrorInfo, Seal, from_event_attributes, split, utcnow
from sluice.errors import PermanentError
from sluice.poison import isolate
from sluice.sealing import SealSettings

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = ["IsolatorSettings", "isolate_request", "metrics_service"]

SERVICE = re.compile(r"[A-Za-z0-9._/-]{1,255}")
"""A metric service a request may name: a stack's name, or ``<stack>/<Workload>``."""


class IsolatorSettings(SealSettings):
    """Settings of the poison-pill isolator Lambda (``SLUICE_POISON_QUEUE_URL``)."""

    poison_queue_url: str = Field(pattern=r"^https?://")


def metrics_service(request: Mapping[str, Any]) -> str | None:
    """The metric service the request's pill is counted under (a redrive plan's ``service``, the
    workload's), or None: the isolator's own (a missing or malformed value is ignored)."""
    service = request.get("service")
    return service if isinstance(service, str) and SERVICE.fullmatch(service) else None


def isolate_request(
    sqs: SQSClient, *, poison_queue_url: str, request: Mapping[str, Any], seal: Seal | None
) -> tuple[str, Envelope, str | None]:
    """The isolator Lambda's work: ``request`` is a redrive plan (``Decision.to_state()``) or any
    ``{"body", "messageAttributes", "reason"?, "messageId"?}``. Returns (poison message id, envelope,
    the problem with the envelope it carried, if any: for the caller's warning and metric).

    The destination is always ``poison_queue_url`` (never a queue named in the request). A request
    without a sluice envelope gets one recording ``reason``, so no poison message lacks forensics.
    """
    body = request.get("body")
    if not isinstance(body, str):
        raise PermanentError("isolation request has no string 'body'")
    raw = request.get("messageAttributes") or {}
    if not isinstance(raw, Mapping):
        raise PermanentError("isolation request 'messageAttributes' must be an object")
    user, envelope, problem = split(from_event_attributes(dict(raw)), body=body, seal=seal)
    if envelope is None or envelope.last_error is None:
        reason = str(request.get("reason") or "isolated without a recorded reason")
        message_id = request.get("messageId")
        base = envelope or Envelope(origin_id=None if message_id is None else str(message_id))
        now = utcnow()
        envelope = base.recording(
            ErrorInfo.of(PermanentError.__name__, reason, at=now), attempts=max(base.attempts, 1)
        )
    return (
        isolate(
            sqs, poison_queue_url=poison_queue_url, body=body, attributes=user, envelope=envelope, seal=seal
        ),
        envelope,
        problem,
    )
