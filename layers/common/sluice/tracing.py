"""One trace id per message, end to end: the X-Ray header and a W3C ``traceparent`` in the envelope.

The first hop records the message's trace context in its envelope (``trace``: the X-Ray header SQS
delivered with it, ``traceparent``: the producer's W3C ``traceparent`` message attribute, else the same
trace as the X-Ray header, else a new one). Every later hop:

- sends the message with the X-Ray header as its ``AWSTraceHeader`` system attribute (SQS → Lambda
  trace linking) and starts a delay bucket's execution with it (``traceHeader``), so X-Ray keeps one
  trace across the queues, the dead-letter queue, the redrive and the long delay;
- logs the message with ``correlation_id`` = the W3C trace id, so one id finds every log line of it.

Both values sit in the unsealed part of the envelope (a producer may set them): they are validated
here, where they are used, and a malformed one is dropped rather than sent (SQS refuses a malformed
``AWSTraceHeader``, which would block the message).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Any

__all__ = [
    "AWS_TRACE_HEADER",
    "TRACEPARENT",
    "correlation_id",
    "derived_traceparent",
    "first_hop",
    "new_traceparent",
    "system_attributes",
    "traceparent_of",
    "valid_traceparent",
    "valid_xray_header",
]

AWS_TRACE_HEADER = "AWSTraceHeader"
"""The SQS system attribute (and Lambda record attribute) carrying the X-Ray header."""
TRACEPARENT = "traceparent"
"""The W3C message attribute OpenTelemetry's SQS propagation uses."""

# \Z, not $: a $ also matches before a trailing newline, which SQS refuses in an AWSTraceHeader.
# '|' joins the entries of the Lineage field Lambda adds (Lineage=a87bd80c:1|68fd508a:5): a header
# AWS itself delivers must not be dropped as malformed.
_XRAY = re.compile(r"^[A-Za-z0-9=;:_.?|-]{1,256}\Z")
_XRAY_ROOT = re.compile(r"(?:^|;)Root=1-([0-9a-f]{8})-([0-9a-f]{24})(?:;|$)")
_XRAY_PARENT = re.compile(r"(?:^|;)Parent=([0-9a-f]{16})(?:;|$)")
_XRAY_SAMPLED = re.compile(r"(?:^|;)Sampled=([01?])(?:;|$)")
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})\Z")


def valid_xray_header(value: Any) -> str | None:
    """``value`` when it is an X-Ray trace header SQS accepts (a ``Root=1-…`` field), else None."""
    if isinstance(value, str) and _XRAY.match(value) and _XRAY_ROOT.search(value):
        return value
    return None


def valid_traceparent(value: Any) -> str | None:
    """``value`` when it is a W3C ``traceparent`` of version 00 with non-zero ids, else None."""
    if not isinstance(value, str):
        return None
    match = _TRACEPARENT.match(value)
    if match is None or set(match.group(1)) == {"0"} or set(match.group(2)) == {"0"}:
        return None
    return value


def new_traceparent() -> str:
    """A new sampled trace (a message whose producer sent no trace context)."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


def traceparent_of(xray_header: str | None) -> str | None:
    """The W3C form of an X-Ray header: the same trace id (its epoch and random parts joined), the same
    parent, sampled unless the header says ``Sampled=0``."""
    header = valid_xray_header(xray_header)
    root = _XRAY_ROOT.search(header) if header else None
    if header is None or root is None:
        return None
    parent = _XRAY_PARENT.search(header)
    sampled = _XRAY_SAMPLED.search(header)
    flags = "00" if sampled and sampled.group(1) == "0" else "01"
    span = parent.group(1) if parent else secrets.token_hex(8)
    return f"00-{root.group(1)}{root.group(2)}-{span}-{flags}"


def derived_traceparent(identity: str) -> str:
    """A trace for a message that arrived with none, derived from its identity (its origin id): every
    receive and every hop derives the same one until an envelope carrying it is sent on."""
    digest = hashlib.sha256(identity.encode()).hexdigest()
    return f"00-{digest[:32]}-{digest[32:48]}-01"


def first_hop(
    xray_header: Any, producer_traceparent: Any, identity: str | None = None
) -> tuple[str | None, str]:
    """The trace context a message starts with: (its X-Ray header, its ``traceparent``): the producer's
    W3C context, else the X-Ray trace, else one derived from ``identity`` (else a new one)."""
    header = valid_xray_header(xray_header)
    parent = valid_traceparent(producer_traceparent) or traceparent_of(header)
    if parent is None:
        parent = derived_traceparent(identity) if identity else new_traceparent()
    return header, parent


def correlation_id(traceparent: str | None, xray_header: str | None = None) -> str | None:
    """The id every log line of a message carries: the W3C trace id (32 hex digits)."""
    parent = valid_traceparent(traceparent) or traceparent_of(xray_header)
    return parent.split("-")[1] if parent else None


def system_attributes(xray_header: str | None) -> dict[str, dict[str, str]]:
    """``MessageSystemAttributes`` carrying the message's X-Ray header ({} without a valid one)."""
    header = valid_xray_header(xray_header)
    if header is None:
        return {}
    return {AWS_TRACE_HEADER: {"DataType": "String", "StringValue": header}}
