"""Starting a record only while there is time to finish it.

Lambda ends an invocation at its timeout, and a batch whose invocation timed out comes back WHOLE
after the queue's visibility timeout (six times the function's): the records already processed too
(then skipped as duplicates), and the records not yet started wait minutes for nothing. So the
consumer starts a record only while the invocation has time left for it: more than twice the longest
a record of this invocation has taken so far, and at least :data:`MIN_MARGIN_SECONDS`. A record not
started is handed back at once (visibility 0, reported in ``batchItemFailures``, counted in
``RecordsDeferred``): Lambda deletes the records that finished, and the rest are received again
straight away, by an invocation with its whole timeout ahead of it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from sluice.errors import TransientError
from sluice.logevents import EVENT, LogEvent

__all__ = ["MIN_MARGIN_SECONDS", "Deadline", "DeadlineNearError", "hand_back"]

MIN_MARGIN_SECONDS = 1.0
"""The least time left with which a record is still started (a record's AWS calls, the batch's end)."""


class DeadlineNearError(TransientError):
    """Not started: too little of the invocation was left to finish it (handed back at once)."""


class Deadline:
    """Whether one more record fits in what is left of the invocation (thread-safe: records may run on
    the consumer's pool). ``remaining_ms`` is the context's ``get_remaining_time_in_millis``; without
    one (a test calling the handler directly), every record is started."""

    def __init__(
        self, remaining_ms: Callable[[], int] | None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._remaining_ms = remaining_ms
        self._clock = clock
        self._longest = 0.0
        self._lock = threading.Lock()

    def margin(self) -> float:
        """Seconds that must be left to start a record."""
        with self._lock:
            return max(MIN_MARGIN_SECONDS, 2 * self._longest)

    def allows_another(self) -> bool:
        if self._remaining_ms is None:
            return True
        return self._remaining_ms() / 1000 > self.margin()

    def timed(self, run: Callable[[], None]) -> None:
        """Run one record's handling, remembering how long it took."""
        started = self._clock()
        try:
            run()
        finally:
            took = self._clock() - started
            with self._lock:
                self._longest = max(self._longest, took)


def hand_back(sqs: Any, queue_url: str, record: Any, log: Any, margin: float) -> NoReturn:
    """Make a record not started visible again at once (its receive still counts toward the DLQ), log it
    and raise :class:`DeadlineNearError`, so that it is reported in ``batchItemFailures``."""
    try:
        sqs.change_message_visibility(
            QueueUrl=queue_url, ReceiptHandle=record.receipt_handle, VisibilityTimeout=0
        )
    except Exception:
        log.warning("could not hand the record back at once; the queue's timeout applies", exc_info=True)
    log.info(
        "record not started: too little time left; handed back",
        extra={EVENT: LogEvent.RECORD_DEFERRED, "message_id": record.message_id, "margin_seconds": margin},
    )
    raise DeadlineNearError(f"not started: less than {margin:.1f} s left in the invocation")
