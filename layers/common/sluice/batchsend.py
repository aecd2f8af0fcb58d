"""SendMessageBatch done right: ≤ 10 entries and ≤ 1 MiB per call, only failed entries retried.

Used by every sluice function that forwards messages (direct delayed sends, rehydration, redrive).
Each entry keeps its body, user attributes and envelope; entries that SQS keeps refusing after the
retries are returned to the caller, never dropped silently.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.limits import MAX_BATCH_BYTES, MAX_BATCH_ENTRIES, MAX_DELAY_SECONDS
from sluice.sqs import attribute_bytes

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


@dataclass(frozen=True)
class Outgoing:
    """One message to send. ``key`` identifies it to the caller (e.g. the original message id)."""

    key: str
    body: str
    attributes: SendAttributes = field(default_factory=dict)
    delay_seconds: int = 0

    def size(self) -> int:
        return len(self.body.encode("utf-8")) + attribute_bytes(self.attributes)


@dataclass
class Refused:
    message: Outgoing
    code: str
    reason: str
    sender_fault: bool
    """SQS refused this entry itself as malformed: it will never be accepted."""
    retryable: bool = True
    """False for a whole-call error no retry fixes now (e.g. the queue does not exist)."""


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
) -> list[Refused]:
    """Send everything; returns what SQS still refused after ``attempts`` tries (sender faults at once)."""
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    refused: list[Refused] = []
    for batch in chunks(messages):
        pending = list(batch)
        for attempt in range(1, attempts + 1):
            failed = _send_once(sqs, queue_url, pending)
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


def _send_once(sqs: SQSClient, queue_url: str, batch: list[Outgoing]) -> list[Refused]:
    entries: list[Any] = []
    for i, message in enumerate(batch):
        entry: dict[str, Any] = {"Id": str(i), "MessageBody": message.body}
        if message.attributes:
            entry["MessageAttributes"] = message.attributes
        if message.delay_seconds > 0:
            entry["DelaySeconds"] = max(0, min(MAX_DELAY_SECONDS, int(message.delay_seconds)))
        entries.append(entry)
    try:
        response = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
    except Exception as exc:  # noqa: BLE001 - the whole call failed: every entry is retried
        # A whole-call error (missing queue, throttling, a request-level problem) is no fault of any
        # one entry: never a sender fault, so no entry is poisoned for it; the caller keeps them.
        failure: dict[str, Any] = getattr(exc, "response", None) or {}  # timeouts carry response=None
        code = failure.get("Error", {}).get("Code", exc.__class__.__name__)
        retryable = code not in CALL_ERRORS_NOT_RETRIED
        return [Refused(m, str(code), str(exc), sender_fault=False, retryable=retryable) for m in batch]
    return [
        Refused(
            batch[int(f["Id"])],
            str(f.get("Code", "")),
            str(f.get("Message", "")),
            bool(f.get("SenderFault", False)),
        )
        for f in response.get("Failed", [])
    ]
