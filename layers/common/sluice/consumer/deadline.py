"""Starting a record only while there is time to finish it.

Lambda ends an invocation at its timeout, and a batch whose invocation timed out comes back WHOLE
after the queue's visibility timeout (six times the function's): the records already processed too
(then skipped as duplicates), and the records not yet started wait minutes for nothing. So the
consumer starts a record only while the invocation has time left for it: more than twice the longest
a record of this invocation has taken so far, and at least :data:`MIN_MARGIN_SECONDS`. A record not
started is handed back (visible again after the backoff floor, reported in ``batchItemFailures``,
counted in ``RecordsDeferred``): Lambda deletes the records that finished, and the rest are received
again soon, by an invocation with its whole timeout ahead of it.

A deferral still costs a receive, so it is never what sends a record to the dead-letter queue: the
first record of an invocation is always started (a function whose timeout is shorter than the margin
still processes one a batch), and so is a record on one of its last two receives (it goes through the
whole consumer: processed, or dead-lettered with its error).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from sluice.arrival import receive_count
from sluice.errors import TransientError
from sluice.logevents import EVENT, LogEvent

__all__ = ["MIN_MARGIN_SECONDS", "Deadline", "DeadlineNearError"]

MIN_MARGIN_SECONDS = 1.0
"""The least time left with which a record is still started (a record's AWS calls, the batch's end)."""


class DeadlineNearError(TransientError):
    """Not started: too little of the invocation was left to finish it (handed back, never backed off)."""


class Deadline:
    """Which records of one invocation are started (thread-safe: records may run on the consumer's pool).

    ``remaining_ms`` is the context's ``get_remaining_time_in_millis``; without one (a test calling the
    handler directly), every record is started. ``max_receive_count`` is the queue's (a record on one of
    its last two receives is always started)."""

    def __init__(
        self,
        remaining_ms: Callable[[], int] | None,
        *,
        max_receive_count: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._remaining_ms = remaining_ms
        self._last_receives = max_receive_count - 1
        self._clock = clock
        self._longest = 0.0
        self._started = 0
        self._lock = threading.Lock()

    def missed(self, record: Any) -> float | None:
        """None when ``record`` (a :class:`~sluice.partial.SqsRecord`) may start, counted as started; else the
        margin in seconds the invocation's remaining time did not exceed."""
        with self._lock:
            margin = max(MIN_MARGIN_SECONDS, 2 * self._longest)
            receives = receive_count(record.raw_event.get("attributes")) or self._last_receives
            if (
                self._remaining_ms is None
                or self._started == 0
                or receives >= self._last_receives
                or self._remaining_ms() / 1000 > margin
            ):
                self._started += 1
                return None
            return margin

    def timed(self, run: Callable[[], None]) -> None:
        """Run one record's handling, remembering how long it took."""
        started = self._clock()
        try:
            run()
        finally:
            took = self._clock() - started
            with self._lock:
                self._longest = max(self._longest, took)

    @staticmethod
    def hand_back(
        sqs: Any, queue_url: str, record: Any, *, visibility: int, log: Any, margin: float
    ) -> NoReturn:
        """Make a record not started visible again after ``visibility`` seconds (its receive still
        counts), log it and raise :class:`DeadlineNearError`, so that it is in ``batchItemFailures``."""
        log.info(
            "record not started: too little time left; handed back",
            extra={
                EVENT: LogEvent.RECORD_DEFERRED,
                "message_id": record.message_id,
                "margin_seconds": margin,
            },
        )
        try:
            sqs.change_message_visibility(
                QueueUrl=queue_url, ReceiptHandle=record.receipt_handle, VisibilityTimeout=visibility
            )
        except Exception:
            log.warning("could not hand the record back soon; the queue's timeout applies", exc_info=True)
        raise DeadlineNearError(f"not started: {margin:.1f} s or less left in the invocation")
