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

Records finish while a beat is running, so a beat never holds the lock across an API call: it takes
a snapshot of the records under the lock, then, per call, re-checks under the lock which of the
next records are still unfinished or succeeded (one settled meanwhile is skipped), marks those ids
in flight and makes the call without the lock. ``succeed`` never waits. ``settle`` waits only while
that very record is part of a call in flight, and returns once it is not: after ``settle`` returns
no extension of the record is running or will start, so a backoff visibility set right after it is
never overwritten.

Which thread beats: the Lambda runtime calls the handler on the process's main thread, one invocation
at a time, and a thread started per batch costs the batch its start (the starter waits until the new
thread runs: hundreds of microseconds of CPU, more wall time on a busy CPU). So the batches handled on
the main thread share one thread (:class:`_Pacer`), which beats whichever batch is entered and ends once
it wakes with none; a batch on any other thread starts a thread of its own, which it joins on exit (the
local runtime runs each invocation on a thread of its own, whose threads inherit its context). Either
way, once ``__exit__`` returns no beat of the batch is running or will start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sluice.limits import MAX_BATCH_ENTRIES, MAX_VISIBILITY_SECONDS

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import ChangeMessageVisibilityBatchRequestEntryTypeDef

DETACH_TIMEOUT_SECONDS = 10
"""How long a leaving batch waits for its heartbeat's beat in flight (a hung visibility call)."""

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
        # Signalled (under _lock) whenever the ids of a call leave _in_call.
        self._call_returned = threading.Condition(self._lock)
        # message id -> number of calls in flight that carry it (a count, in case beats overlap).
        self._in_call: dict[str, int] = {}
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._pacer: _Pacer | None = None
        self._started_at = clock()
        self.extensions = 0

    def __enter__(self) -> Heartbeat:
        self._started_at = self._clock()
        if not self._pending:
            return self
        if threading.current_thread() is threading.main_thread() and _MAIN.attach(self, self._first):
            self._pacer = _MAIN
        else:
            self._thread = threading.Thread(target=self._run, name="sluice-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def settle(self, message_id: str) -> None:
        """Stop extending a failed record. Returns only once no extension of it is in progress.

        Waits only while a call carrying this record is in flight, never for the rest of a beat.
        """
        with self._call_returned:
            self._pending.pop(message_id, None)
            self._call_returned.wait_for(lambda: message_id not in self._in_call)

    def succeed(self, message_id: str) -> None:
        """The record is done and awaits deletion at batch end: keep it invisible while others run.

        Never waits for a call in flight: the record keeps being extended either way.
        """
        with self._lock:
            record = self._pending.pop(message_id, None)
            if record is not None:
                self._succeeded[message_id] = record

    def stop(self) -> None:
        self._stopped.set()
        if self._pacer is not None:
            self._pacer.detach(self)
            self._pacer = None
        if self._thread is not None:
            self._thread.join(timeout=DETACH_TIMEOUT_SECONDS)
            self._thread = None

    def _run(self) -> None:
        wait = self._first
        while not self._stopped.wait(wait):
            self.beat()
            wait = self._interval

    def beat(self) -> None:
        """Extend every unfinished record once (the thread calls this; tests may too).

        The lock is held only to take the snapshot and to pick each call's records, never across
        an API call.
        """
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
            cursor = 0
            while cursor < len(records):
                chunk, cursor = self._claim(records, cursor)
                if chunk is None:
                    return  # nothing unfinished is left: the batch is about to return
                if chunk:
                    self._extend(queue_url, chunk, timeout)

    def _claim(self, records: list[InFlight], cursor: int) -> tuple[list[InFlight] | None, int]:
        """Under the lock: the next (at most 10) records of the snapshot still to extend, marked in flight.

        A record settled or refused since the snapshot is skipped. ``None`` once no record is
        pending any more (succeeded records only ride along with unfinished ones).
        """
        with self._lock:
            if not self._pending:
                return None, cursor
            chunk: list[InFlight] = []
            while cursor < len(records) and len(chunk) < MAX_BATCH_ENTRIES:
                record = records[cursor]
                cursor += 1
                if record.message_id in self._pending or record.message_id in self._succeeded:
                    chunk.append(record)
            for record in chunk:
                self._in_call[record.message_id] = self._in_call.get(record.message_id, 0) + 1
            return chunk, cursor

    def _extend(self, queue_url: str, chunk: list[InFlight], timeout: int) -> None:
        """One API call for a claimed chunk, made without the lock; callbacks run after release."""
        entries: list[ChangeMessageVisibilityBatchRequestEntryTypeDef] = [
            {"Id": str(i), "ReceiptHandle": r.receipt_handle, "VisibilityTimeout": timeout}
            for i, r in enumerate(chunk)
        ]
        errors: list[tuple[str, str]] = []
        refused: list[str] = []
        ok = 0
        try:
            try:
                response = self._sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries)
            except Exception as exc:  # noqa: BLE001 - a failed extension must never fail the batch
                errors = [(r.message_id, f"visibility extension failed: {exc}") for r in chunk]
            else:
                ok = len(response.get("Successful", []))
                for failed in response.get("Failed", []):
                    message_id = chunk[int(failed["Id"])].message_id
                    errors.append((message_id, f"visibility extension refused: {failed.get('Code')}"))
                    refused.append(message_id)
        finally:
            with self._call_returned:
                # A refused handle (message re-delivered or deleted) will not succeed later either.
                for message_id in refused:
                    self._pending.pop(message_id, None)
                    self._succeeded.pop(message_id, None)
                self.extensions += ok
                for record in chunk:
                    left = self._in_call.pop(record.message_id) - 1
                    if left:
                        self._in_call[record.message_id] = left
                self._call_returned.notify_all()
        for message_id, reason in errors:
            self._on_error(message_id, reason)
        if ok:
            self._on_extended(ok)


class _Pacer:
    """One thread beating the batches of the main thread, one batch after another (see the module's
    docstring). It sleeps until the entered batch's next beat is due; it ends when it wakes with no batch
    entered, and the next batch starts it again. A batch leaving never wakes it, and a batch entering
    wakes it only when its first beat is due before the thread's current wait ends (never, between
    batches of one consumer: the later batch's beats are due later)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._entered: Heartbeat | None = None
        self._beating: Heartbeat | None = None
        self._due = 0.0  # time.monotonic() of the next beat (the last batch's, once it left)
        self._wakes_at: float | None = None  # when the thread's current wait ends (None: not waiting)

    def attach(self, heartbeat: Heartbeat, first: float) -> bool:
        """Beat ``heartbeat`` after ``first`` seconds, then every interval; False when another batch is
        entered (nested use: the caller starts a thread of its own)."""
        with self._cond:
            if self._entered is not None:
                return False
            self._entered = heartbeat
            self._due = time.monotonic() + first
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="sluice-heartbeat", daemon=True)
                self._thread.start()
            elif self._wakes_at is not None and self._due < self._wakes_at:
                self._cond.notify()
            return True

    def detach(self, heartbeat: Heartbeat) -> None:
        """No beat of ``heartbeat`` starts after this; returns once none is running, or after
        :data:`DETACH_TIMEOUT_SECONDS` of a beat hung in its calls (as a batch's own thread is joined)."""
        with self._cond:
            if self._entered is heartbeat:
                self._entered = None
            left = self._cond.wait_for(lambda: self._beating is not heartbeat, timeout=DETACH_TIMEOUT_SECONDS)
            if not left:
                logging.getLogger(__name__).warning(
                    "visibility heartbeat still running after %s s: the batch leaves without it",
                    DETACH_TIMEOUT_SECONDS,
                )

    def _run(self) -> None:
        me = threading.current_thread()
        with self._cond:
            try:
                while True:
                    now = time.monotonic()
                    if self._due > now:
                        self._wakes_at = self._due
                        self._cond.wait(self._due - now)
                        self._wakes_at = None
                        continue
                    heartbeat = self._entered
                    if heartbeat is None:
                        return  # idle: the next batch starts a thread again
                    self._beat(heartbeat)
            finally:
                if self._thread is me:
                    self._thread = None

    def _beat(self, heartbeat: Heartbeat) -> None:
        """Under the lock, released for the beat itself."""
        self._beating = heartbeat
        self._cond.release()
        try:
            heartbeat.beat()
        except Exception:  # beat reports its calls' failures itself; this thread goes on for the next batches
            logging.getLogger(__name__).exception("visibility heartbeat failed")
        finally:
            self._cond.acquire()
            self._beating = None
            self._cond.notify_all()
        if self._entered is heartbeat:
            self._due = time.monotonic() + heartbeat._interval


_MAIN = _Pacer()
