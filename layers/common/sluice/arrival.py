"""An arriving message, read once: the one owner of what every sluice hop reads from its input.

A message reaches sluice either as a record of a Lambda SQS event (the consumer, the batch-delay
function, the job consumer) or as one message of a ReceiveMessage answer (the redriver, the redrive
state machine's Plan step). :class:`Arrival` reads either into the same parts:

- the message id, the body, the user's own attributes (the envelope removed, displaced ones restored);
- the envelope, verified with the stack's :class:`~sluice.envelope.Seal`: bookkeeping whose seal does
  not hold is dropped and :attr:`Arrival.problem` says why (the caller logs it and counts it in
  ``EnvelopesCorrupt``);
- the first hop's identity where the envelope lacks it: this message's id as ``origin_id``, the queue
  it came from as ``source`` (also beside an ``origin_id`` that came without one);
- its trace context (:func:`sluice.tracing.first_hop`: the envelope's, else the ``AWSTraceHeader`` it
  arrived with and the producer's ``traceparent`` attribute, else one derived from its identity);
- its group id (:func:`sluice.groups.group_of`: the ``MessageGroupId`` SQS delivered it with, else the
  envelope's ``group`` if well-formed), written into the envelope's ``group`` so every hop sends it on;
- SQS's receive count (:func:`receive_count`, the one parser) and its send time;
- :attr:`Arrival.sourced_envelope`: the envelope a hop that gives up on the message (dead-letters or
  isolates it itself) sends it on with, its ``source`` the queue it failed on.

When a record cannot be read at all (its attributes are not what SQS sends), :func:`fallback_ids` is
what the hop can still tell about it: its message id, the trace id of the ``AWSTraceHeader`` it arrived
with and its receive count, for the log line and the backoff of its retry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sluice.envelope import Envelope, Seal, SendAttributes, from_event_attributes, split, string_value
from sluice.groups import group_of
from sluice.tracing import (
    AWS_TRACE_HEADER,
    TRACEPARENT,
    correlation_id,
    first_hop,
    valid_traceparent,
    valid_xray_header,
)

__all__ = [
    "DEAD_LETTER_SOURCE",
    "RECEIVE_COUNT",
    "SENT_TIMESTAMP",
    "Arrival",
    "Unread",
    "fallback_ids",
    "receive_count",
]

RECEIVE_COUNT = "ApproximateReceiveCount"
"""SQS's system attribute: how many times the message has been received."""
SENT_TIMESTAMP = "SentTimestamp"
"""SQS's system attribute: when the queue accepted the message (epoch milliseconds)."""
DEAD_LETTER_SOURCE = "DeadLetterQueueSourceArn"
"""SQS's system attribute on a message its redrive policy moved: the queue it was moved from."""


def receive_count(system: Mapping[str, Any] | None) -> int | None:
    """The ``ApproximateReceiveCount`` in SQS system attributes ``system``: a whole number of at least
    1, or None when it is missing or not one (SQS always sends it; anything else is a hand-made event)."""
    raw = (system or {}).get(RECEIVE_COUNT)
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        return None
    if isinstance(raw, str) and not re.fullmatch("[0-9]+", raw):  # int() also takes " 12 ", "1_0", "٣"
        return None
    try:
        count = int(raw)
    except ValueError:  # longer than Python converts
        return None
    return count if count >= 1 else None


@dataclass(frozen=True)
class Arrival:
    """One message as it arrived at a sluice hop (see the module's docstring)."""

    message_id: str
    body: str
    """The body exactly as it arrived (a claim-check pointer is not resolved here)."""
    attributes: SendAttributes
    """The user's own message attributes in the SendMessage shape (the envelope removed)."""
    envelope: Envelope
    """The verified envelope with the first hop's identity and trace context filled in."""
    carried: bool
    """Whether the message arrived with an envelope (readable, and not emptied by its seal check)."""
    problem: str | None
    """Why (part of) the envelope it carried was ignored: unreadable, forged or altered."""
    receives: int | None
    """SQS's receive count (:func:`receive_count`), None when it did not say."""
    system: Mapping[str, Any] = field(repr=False)
    """SQS's system attributes as they arrived (``AWSTraceHeader``, ``SentTimestamp``, ...)."""
    receipt_handle: str | None = field(default=None, repr=False)
    queue_arn: str | None = None
    """The queue it was received from, when the input says (a Lambda record's ``eventSourceARN``)."""
    carried_envelope: Envelope | None = field(default=None, repr=False)
    """The envelope as it arrived, after its seal check and before the first hop's identity and trace
    were filled in (what an operator's tool shows); None when it carried none."""
    arrived: SendAttributes = field(default_factory=dict, repr=False)
    """Every message attribute as it arrived, the envelope's included (SendMessage shape)."""

    @classmethod
    def from_record(cls, record: Mapping[str, Any], *, seal: Seal | None) -> Arrival:
        """From one record of a Lambda SQS event (the raw dict, or one holding it as ``raw_event``:
        :class:`~sluice.partial.SqsRecord`, Powertools' ``SQSRecord``).

        ``seal`` verifies the envelope (``None`` only for tools that display: nothing is verified)."""
        raw = getattr(record, "raw_event", record)
        queue_arn = raw.get("eventSourceARN")
        return cls._read(
            message_id=str(raw["messageId"]),
            body=raw.get("body") or "",
            attributes=from_event_attributes(raw.get("messageAttributes")),
            system=raw.get("attributes") or {},
            source=queue_arn,
            seal=seal,
            receipt_handle=raw.get("receiptHandle"),
            queue_arn=queue_arn,
        )

    @classmethod
    def from_message(
        cls, message: Mapping[str, Any], *, seal: Seal | None, source: str | None = None
    ) -> Arrival:
        """From one message of a ReceiveMessage answer (boto3's ``Messages[i]``, or Step Functions'
        with base64 binary values). The first hop's ``source`` is ``source`` when given, else the
        ``DeadLetterQueueSourceArn`` SQS set when its redrive policy moved the message."""
        system = {str(k): str(v) for k, v in (message.get("Attributes") or {}).items()}
        return cls._read(
            message_id=str(message["MessageId"]),
            body=str(message.get("Body") or ""),
            attributes=from_event_attributes(message.get("MessageAttributes")),
            system=system,
            source=source or system.get(DEAD_LETTER_SOURCE),
            seal=seal,
            receipt_handle=message.get("ReceiptHandle"),
        )

    @classmethod
    def _read(
        cls,
        *,
        message_id: str,
        body: str,
        attributes: SendAttributes,
        system: Mapping[str, Any],
        source: str | None,
        seal: Seal | None,
        receipt_handle: str | None,
        queue_arn: str | None = None,
    ) -> Arrival:
        user, carried, problem = split(attributes, body=body, seal=seal)
        envelope = carried or Envelope()
        update: dict[str, Any] = {}  # one copy of the envelope for every part filled in
        origin_id = envelope.origin_id
        if origin_id is None:  # first hop (or bookkeeping that failed its seal): its own identity
            origin_id = update["origin_id"] = message_id
            update["source"] = envelope.source or source
        elif envelope.source is None and source is not None:
            # an envelope that names its origin but no queue (e.g. a request `sluice delay-dlq replay`
            # sent back): the queue it arrived on, as for a first hop
            update["source"] = source
        if not valid_traceparent(envelope.traceparent) or valid_xray_header(envelope.trace) != envelope.trace:
            # the first hop, an envelope written before traceparent existed, or a producer's malformed one
            update["trace"], update["traceparent"] = first_hop(
                valid_xray_header(envelope.trace) or system.get(AWS_TRACE_HEADER),
                envelope.traceparent or string_value(user, TRACEPARENT),
                origin_id,
            )
        group, group_problem = group_of(system, envelope.group)
        if group != envelope.group:
            update["group"] = group
        problem = "; ".join(p for p in (problem, group_problem) if p) or None
        if update:
            envelope = envelope.model_copy(update=update)
        return cls(
            message_id=message_id,
            body=body,
            attributes=user,
            envelope=envelope,
            carried=carried is not None,
            problem=problem,
            receives=receive_count(system),
            system=system,
            receipt_handle=None if receipt_handle is None else str(receipt_handle),
            queue_arn=queue_arn,
            carried_envelope=carried,
            arrived=attributes,
        )

    @property
    def sourced_envelope(self) -> Envelope:
        """:attr:`envelope` with ``source`` = the queue the message was received from (:attr:`queue_arn`),
        when the input says: what a hop that dead-letters or isolates the message itself records, so a
        redrive or a replay takes it back to the queue it failed on. The first hop's source is not that
        queue for a message that came through the long-delay pipeline (it is the delay queue)."""
        if self.queue_arn is None:
            return self.envelope
        return self.envelope.model_copy(update={"source": self.queue_arn})

    @property
    def group(self) -> str | None:
        """Its checked group id (the envelope's ``group``, filled in from what SQS delivered)."""
        return self.envelope.group if isinstance(self.envelope.group, str) else None

    @property
    def receive_count(self) -> int:
        """The receive count for backoff and dead-lettering: 1 when SQS did not say."""
        return self.receives or 1

    @property
    def correlation_id(self) -> str | None:
        """Its trace's id, on every log line about it (:func:`sluice.tracing.correlation_id`)."""
        return correlation_id(self.envelope.traceparent, self.envelope.trace)

    def ids(self) -> dict[str, str | None]:
        """What a log line about it carries: its message id and its ``correlation_id``."""
        return {"message_id": self.message_id, "correlation_id": self.correlation_id}

    @property
    def sent_at(self) -> datetime | None:
        """When SQS accepted it (``SentTimestamp``), if it says."""
        raw = self.system.get(SENT_TIMESTAMP)
        try:
            return datetime.fromtimestamp(int(raw) / 1000, tz=UTC) if raw else None
        except (TypeError, ValueError, OverflowError, OSError):
            return None


@dataclass(frozen=True)
class Unread:
    """What a hop still reads of a record :class:`Arrival` could not read (:func:`fallback_ids`)."""

    message_id: str | None
    correlation_id: str | None
    """The trace id of the ``AWSTraceHeader`` it arrived with (None without a valid one)."""
    receive_count: int
    """SQS's receive count, 1 when it did not say (as :attr:`Arrival.receive_count`)."""

    def ids(self) -> dict[str, str | None]:
        """What a log line about it carries, as :meth:`Arrival.ids`."""
        return {"message_id": self.message_id, "correlation_id": self.correlation_id}


def fallback_ids(record: Mapping[str, Any]) -> Unread:
    """The ids and receive count of a Lambda SQS ``record`` (raw, or wrapped as :meth:`Arrival.from_record`
    takes it) whose reading failed: only SQS's own fields are read, each only if it has the shape SQS
    gives it."""
    raw = getattr(record, "raw_event", record)
    system = raw.get("attributes")
    if not isinstance(system, Mapping):
        system = {}
    header = system.get(AWS_TRACE_HEADER)
    message_id = raw.get("messageId")
    return Unread(
        message_id=message_id if isinstance(message_id, str) else None,
        correlation_id=correlation_id(None, header if isinstance(header, str) else None),
        receive_count=receive_count(system) or 1,
    )
