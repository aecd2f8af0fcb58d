"""Visibility heartbeat for a batch being processed.

Every record of a batch is in flight from the moment Lambda received the batch, not only the one
being worked on. While the batch runs longer than ``fraction`` of the visibility timeout, the
heartbeat extends the visibility of EVERY record not yet finished (ChangeMessageVisibilityBatch,
10 per call), then again every ``fraction`` of the timeout, so no record reappears to another
consumer mid-batch. A record that failed stops being extended the moment it is settled (its backoff
visibility is never overwritten). A record that succeeded is deleted by Lambda only when the whole
batch returns, so it keeps riding along with the unfinished ones (same API calls, no extra cost)
instead of reappearing and being processed again. Never past SQS's 12-hour limit; failures are
reported to ``on_error`` and are never fatal.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sluice.errors import MAX_VISIBILITY_SECONDS

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import ChangeMessageVisibilityBatchRequestEntryTypeDef

SAFETY_SECONDS = 5  # margin below the 12-hour limit


@dataclass(frozen=True, slots=True)
class InFlight:
    message_id: str
    receipt_handle: str
    queue_url: str


class Heartbeat:
    """Keeps unfinished records of one batch invisible. Use as a context manager."""

    def __init__(
        self,
        sqs: SQSClient,
        records: Iterable[InFlight],
        *,
        visibility_timeout: int,
        fraction: float = 0.5,
        batch_window: int = 0,
        on_extended: Callable[[int], None] = lambda n: None,
        on_error: Callable[[str, str], None] = lambda message_id, reason: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sqs = sqs
        self._pending = {r.message_id: r for r in records}
        self._succeeded: dict[str, InFlight] = {}
        self._timeout = max(1, int(visibility_timeout))
        self._interval = max(0.2, self._timeout * fraction)
        # Records may have waited up to the batching window before this invocation started.
        self._first = max(0.0, self._interval - batch_window)
        self._window = batch_window
        self._on_extended = on_extended
        self._on_error = on_error
        self._clock = clock
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_at = clock()
        self.extensions = 0

    def __enter__(self) -> Heartbeat:
        self._started_at = self._clock()
        if self._pending:
            self._thread = threading.Thread(target=self._run, name="sluice-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def settle(self, message_id: str) -> None:
        """Stop extending a failed record. Returns only once no extension of it is in progress."""
        with self._lock:
            self._pending.pop(message_id, None)

    def succeed(self, message_id: str) -> None:
        """The record is done and awaits deletion at batch end: keep it invisible while others run."""
        with self._lock:
            record = self._pending.pop(message_id, None)
            if record is not None:
                self._succeeded[message_id] = record

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        wait = self._first
        while not self._stopped.wait(wait):
            self.beat()
            wait = self._interval

    def beat(self) -> None:
        """Extend every unfinished record once (the thread calls this; tests may too)."""
        with self._lock:
            elapsed = self._clock() - self._started_at + self._window
            budget = int(MAX_VISIBILITY_SECONDS - elapsed - SAFETY_SECONDS)
            timeout = min(self._timeout, budget)
            if timeout <= 0 or not self._pending:
                return
            by_queue: dict[str, list[InFlight]] = {}
            for record in (*self._pending.values(), *self._succeeded.values()):
                by_queue.setdefault(record.queue_url, []).append(record)
            for queue_url, records in by_queue.items():
                for start in range(0, len(records), 10):
                    self._extend(queue_url, records[start : start + 10], timeout)

    def _extend(self, queue_url: str, chunk: list[InFlight], timeout: int) -> None:
        entries: list[ChangeMessageVisibilityBatchRequestEntryTypeDef] = [
            {"Id": str(i), "ReceiptHandle": r.receipt_handle, "VisibilityTimeout": timeout}
            for i, r in enumerate(chunk)
        ]
        try:
            response = self._sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries)
        except Exception as exc:  # noqa: BLE001 - a failed extension must never fail the batch
            for r in chunk:
                self._on_error(r.message_id, f"visibility extension failed: {exc}")
            return
        ok = len(response.get("Successful", []))
        for failed in response.get("Failed", []):
            record = chunk[int(failed["Id"])]
            self._on_error(record.message_id, f"visibility extension refused: {failed.get('Code')}")
            # A refused handle (message re-delivered or deleted) will not succeed later either.
            self._pending.pop(record.message_id, None)
            self._succeeded.pop(record.message_id, None)
        if ok:
            self.extensions += ok
            self._on_extended(ok)
