"""SendMessageBatch done right: ≤ 10 entries and ≤ 1 MiB per call, only failed entries retried.

Used by every sluice function that forwards messages (direct delayed sends, rehydration, redrive).
Each entry keeps its body, user attributes, envelope and ``MessageGroupId``; entries that SQS keeps
refusing after the retries are returned to the caller, never dropped silently.

One bad entry never takes its batch-mates down: every entry is checked against SQS's rules
(:func:`sluice.sqs.check_message`) before the call, and one SQS would refuse is returned at once as a
sender fault with SQS's reason. Should a whole call still fail with a validation error (a rule the
check does not know, or the SDK's own parameter validation), the batch is split in halves until the
entry that causes it stands alone: only it is refused, the rest are sent.

A message due at a given time (:attr:`Outgoing.due`) gets its ``DelaySeconds`` counted to that time at
each call, not when it was prepared: one behind earlier batches, retries or a slow machine is not
delivered late by that wait.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sluice.envelope import utcnow
from sluice.groups import group_param
from sluice.limits import MAX_BATCH_BYTES, MAX_BATCH_ENTRIES, MAX_DELAY_SECONDS
from sluice.sqs import check_message, message_bytes
from sluice.tracing import system_attributes

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

    from sluice.envelope import SendAttributes

CALL_ERRORS_NOT_RETRIED = {
    "AWS.SimpleQueueService.NonExistentQueue",
    "QueueDoesNotExist",
    "InvalidParameterValue",
    "UnsupportedOperation",
    "InvalidAttributeName",
    "InvalidMessageContents",
}
CALL_ERRORS_OF_AN_ENTRY = {
    "ParamValidationError",  # botocore refused the request before sending it (e.g. no DataType)
    "InvalidParameterValue",
    "InvalidMessageContents",
    "InvalidAttributeName",
    "MessageAttributesInvalid",
    "BatchRequestTooLong",
    "AWS.SimpleQueueService.BatchRequestTooLong",
}
"""Whole-call errors one entry can cause: the batch is narrowed to find it."""


@dataclass(frozen=True)
class Outgoing:
    """One message to send. ``key`` identifies it to the caller (e.g. the original message id)."""

    key: str
    body: str
    attributes: SendAttributes = field(default_factory=dict)
    delay_seconds: int = 0
    trace: str | None = None
    """The message's X-Ray header (its envelope's ``trace``): sent as its ``AWSTraceHeader``."""
    group: str | None = None
    """Its ``MessageGroupId`` (checked, :mod:`sluice.groups`): the fair-queue tenant it keeps on this hop."""
    due: datetime | None = None
    """When it is due at its queue: its ``DelaySeconds`` is then the residual at the moment of each call
    (:func:`residual_seconds`), and ``delay_seconds`` is only what it was when prepared."""

    def __post_init__(self) -> None:
        if self.due is not None and self.due.tzinfo is None:
            raise ValueError("Outgoing.due must be timezone-aware (UTC)")

    def size(self) -> int:
        return message_bytes(self.body, self.attributes)

    def delay_at(self, now: datetime) -> int:
        """The ``DelaySeconds`` it is sent with by a call made at ``now``."""
        if self.due is None:
            return max(0, min(MAX_DELAY_SECONDS, int(self.delay_seconds)))
        return residual_seconds(self.due, now)


def residual_seconds(due: datetime, now: datetime) -> int:
    """Whole seconds still to wait, rounded to the nearest (delivery within ±0.5 s of due rather than
    up to a second late), within SQS DelaySeconds limits (0 to 900)."""
    return max(0, min(MAX_DELAY_SECONDS, math.floor((due - now).total_seconds() + 0.5)))


@dataclass
class Refused:
    message: Outgoing
    code: str
    reason: str
    sender_fault: bool
    """SQS refused this entry itself as malformed: it will never be accepted."""
    retryable: bool = True
    """False for a whole-call error no retry fixes now (e.g. the queue does not exist)."""
    whole_call: bool = False
    """The whole call failed (no entry was judged on its own)."""


def chunks(messages: Sequence[Outgoing], *, max_bytes: int = MAX_BATCH_BYTES) -> list[list[Outgoing]]:
    """Group messages in order into batches of ≤ 10 entries and ≤ ``max_bytes`` in total."""
    out: list[list[Outgoing]] = []
    current: list[Outgoing] = []
    size = 0
    for message in messages:
        n = message.size()
        if current and (len(current) == MAX_BATCH_ENTRIES or size + n > max_bytes):
            out.append(current)
            current, size = [], 0
        current.append(message)
        size += n
    if current:
        out.append(current)
    return out


def send_batch(
    sqs: SQSClient,
    queue_url: str,
    messages: Sequence[Outgoing],
    *,
    attempts: int = 4,
    base_delay: float = 0.2,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], datetime] = utcnow,
) -> list[Refused]:
    """Send everything; returns what SQS still refused after ``attempts`` tries (sender faults at once).
    ``clock`` is read at each call, for the residual delay of messages with a :attr:`Outgoing.due`."""
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    refused: list[Refused] = []
    valid: list[Outgoing] = []
    for message in messages:
        refusal = check_message(message.body, message.attributes)
        if refusal is None:
            valid.append(message)
        else:  # SQS would refuse it: never let it into a call with healthy batch-mates
            refused.append(
                Refused(message, refusal.code, refusal.message, sender_fault=True, retryable=False)
            )
    for batch in chunks(valid):
        pending = list(batch)
        for attempt in range(1, attempts + 1):
            failed = _send_narrowed(sqs, queue_url, pending, clock)
            retry = [f for f in failed if f.retryable and not f.sender_fault]
            refused.extend(f for f in failed if not f.retryable or f.sender_fault)
            pending = [f.message for f in retry]
            if not pending:
                break
            if attempt == attempts:
                refused.extend(retry)
                break
            sleep(random.uniform(0.0, min(5.0, base_delay * 2 ** (attempt - 1))))  # full jitter
    return refused


def _send_narrowed(
    sqs: SQSClient, queue_url: str, batch: list[Outgoing], clock: Callable[[], datetime]
) -> list[Refused]:
    """One call; a whole-call error an entry can cause is narrowed by halves to the entry causing it.

    An entry is blamed (a sender fault) only when it fails while batch-mates of the same call are
    accepted: a call that fails whatever it carries (e.g. a bad queue URL) blames nobody.
    """
    failed = _send_once(sqs, queue_url, batch, clock())
    if len(batch) == 1 or not _call_failed_for_an_entry(failed, batch):
        return failed
    half = len(batch) // 2
    narrowed = _send_narrowed(sqs, queue_url, batch[:half], clock) + _send_narrowed(
        sqs, queue_url, batch[half:], clock
    )
    if len(narrowed) == len(batch) and all(f.whole_call for f in narrowed):
        return failed  # every part failed alone too: the call's fault, not an entry's
    return [
        Refused(f.message, f.code, f.reason, sender_fault=True, retryable=False) if f.whole_call else f
        for f in narrowed
    ]


def _call_failed_for_an_entry(failed: list[Refused], batch: list[Outgoing]) -> bool:
    return (
        len(failed) == len(batch)
        and all(f.whole_call for f in failed)
        and failed[0].code in CALL_ERRORS_OF_AN_ENTRY
    )


def _send_once(sqs: SQSClient, queue_url: str, batch: list[Outgoing], now: datetime) -> list[Refused]:
    entries: list[Any] = []
    for i, message in enumerate(batch):
        entry: dict[str, Any] = {"Id": str(i), "MessageBody": message.body}
        if message.attributes:
            entry["MessageAttributes"] = message.attributes
        if (delay := message.delay_at(now)) > 0:
            entry["DelaySeconds"] = delay
        if system := system_attributes(message.trace):
            entry["MessageSystemAttributes"] = system
        entry.update(group_param(message.group))
        entries.append(entry)
    try:
        response = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
    except Exception as exc:  # noqa: BLE001 - the whole call failed: every entry is retried
        # A whole-call error (missing queue, throttling, a request-level problem) is no fault of any
        # one entry: never a sender fault, so no entry is poisoned for it; the caller keeps them.
        failure: dict[str, Any] = getattr(exc, "response", None) or {}  # timeouts carry response=None
        code = failure.get("Error", {}).get("Code", exc.__class__.__name__)
        retryable = code not in CALL_ERRORS_NOT_RETRIED
        return [
            Refused(m, str(code), str(exc), sender_fault=False, retryable=retryable, whole_call=True)
            for m in batch
        ]
    return [
        Refused(
            batch[int(f["Id"])],
            str(f.get("Code", "")),
            str(f.get("Message", "")),
            bool(f.get("SenderFault", False)),
        )
        for f in response.get("Failed", [])
    ]
