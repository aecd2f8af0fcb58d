"""Job mode: an SQS message names a job id; the row decides what happens.

Per job kind, one of the article's two primitives (docs/jobs.md):

- ``single``: run the handler, then ``complete_if_pending`` (one UPDATE … WHERE status = 'pending').
  For side effects that tolerate a repeat: two racing deliveries may both run the handler; exactly one
  completes the row, the other gets :class:`~sluice.errors.AlreadyHandled`.
- ``two_phase``: ``claim`` (pending → processing, new token), run the handler, ``commit`` under the
  token. For side effects that must not repeat: only the claimant runs the handler; a worker whose
  claim was reaped meanwhile gets :class:`~sluice.errors.LostClaim` and changes nothing.

Always-delete: a job that fails is recorded in its row (error with a retry time, or dead) and its
message counts as handled; duplicates and lost claims are handled too. Only the database being
unreachable sends a message back to SQS (``batchItemFailures``). A message that names no job
(malformed, forged, or a job this database does not have) goes to the poison queue.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from sluice import metrics
from sluice.arrival import Arrival
from sluice.envelope import Seal
from sluice.errors import (
    AlreadyHandled,
    ConfigurationError,
    JobStoreUnavailable,
    LostClaim,
    PermanentError,
    RetryAfter,
)
from sluice.jobs.store import storable
from sluice.logevents import EVENT, LogEvent
from sluice.partial import each_record
from sluice.poison import isolate

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_sqs import SQSClient

    from sluice.jobs.store import Claim, Job, JobStore
    from sluice.metrics import MetricSink

__all__ = ["JobConsumer", "JobKinds", "JobWorker", "Mode", "Outcome", "job_message", "parse_job_message"]

Mode = Literal["single", "two_phase"]
Handler = Callable[["Job"], Any]
T = TypeVar("T")
COMMIT_PATIENCE_SECONDS = 10.0
DEADLINE_RESERVE_SECONDS = 1.5
"""Left of an invocation after the last retry of a run's last transition (the batch still has to answer)."""
"""How long a run's last transition is retried while the database is unavailable, without a deadline."""
MAX_JOB_MESSAGE_BYTES = 4096
"""A job message only names a job; anything longer is not one."""

# Log messages, defined once: tools that find these lines (the e2e trace tests) import them.


class Outcome(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    """Recorded as error: the sweeper re-enqueues it when its retry time comes."""
    DEAD = "dead"
    ALREADY_HANDLED = "already_handled"
    LOST_CLAIM = "lost_claim"


_METRIC = {
    Outcome.COMPLETED: metrics.JOBS_COMPLETED,
    Outcome.FAILED: metrics.JOBS_FAILED,
    Outcome.DEAD: metrics.JOBS_DEAD,
    Outcome.ALREADY_HANDLED: metrics.JOBS_ALREADY_HANDLED,
    Outcome.LOST_CLAIM: metrics.LOST_CLAIMS,
}


@dataclass(frozen=True)
class _Kind:
    handler: Handler
    mode: Mode


class JobKinds:
    """Which handler runs a job kind, and in which mode::

    kinds = JobKinds()

    @kinds.register("charge-card", mode="two_phase")
    def charge(job: Job) -> dict: ...
    """

    def __init__(self) -> None:
        self._kinds: dict[str, _Kind] = {}

    def register(self, kind: str, *, mode: Mode = "two_phase") -> Callable[[Handler], Handler]:
        if mode not in ("single", "two_phase"):
            raise ValueError(f"mode must be 'single' or 'two_phase', got {mode!r}")

        def decorate(handler: Handler) -> Handler:
            if kind in self._kinds:
                raise ValueError(f"job kind {kind!r} is registered twice")
            self._kinds[kind] = _Kind(handler, mode)
            return handler

        return decorate

    def get(self, kind: str) -> _Kind | None:
        return self._kinds.get(kind)

    @property
    def two_phase(self) -> tuple[str, ...]:
        """The kinds that run two-phase (claimed before their handler runs)."""
        return tuple(k for k, v in self._kinds.items() if v.mode == "two_phase")

    @property
    def single(self) -> tuple[str, ...]:
        """The kinds that run single-UPDATE."""
        return tuple(k for k, v in self._kinds.items() if v.mode == "single")

    def __contains__(self, kind: object) -> bool:
        return kind in self._kinds


def job_message(job_id: uuid.UUID | str) -> str:
    """The body of a message that asks a job consumer to look at ``job_id``."""
    return json.dumps({"job_id": str(job_id)}, separators=(",", ":"))


def parse_job_message(body: str) -> uuid.UUID:
    """The job id a message names; :class:`~sluice.errors.PermanentError` for anything else."""
    if len(body.encode("utf-8", "surrogatepass")) > MAX_JOB_MESSAGE_BYTES:
        raise PermanentError(f"a job message is at most {MAX_JOB_MESSAGE_BYTES} bytes; this one is longer")
    try:
        data = json.loads(body)
    except ValueError:
        raise PermanentError('job message is not JSON (expected {"job_id": "<uuid>"})') from None
    raw = data.get("job_id") if isinstance(data, dict) else None
    if not isinstance(raw, str):
        raise PermanentError('job message has no string job_id (expected {"job_id": "<uuid>"})')
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise PermanentError(f"job_id is not a UUID: {raw[:64]!r}") from None


class JobWorker:
    """Runs one job by id in its kind's mode; returns what happened (never raises for a job's own
    failure). Raises :class:`~sluice.errors.JobStoreUnavailable` when the database is unreachable and
    :class:`~sluice.errors.JobNotFound` when there is no such job."""

    def __init__(
        self,
        store: JobStore,
        kinds: JobKinds,
        *,
        logger: Logger | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._store = store
        self._kinds = kinds
        self._log = logger
        self._sleep = sleep

    def run(self, job_id: uuid.UUID, *, deadline: float | None = None, trace: str | None = None) -> Outcome:
        """Run one delivery of ``job_id``. ``deadline`` (``time.monotonic()``): until when the final
        commit or fail may be retried while the database is unavailable (default: 10 s from its first
        try) — the handler has run, so giving up early would have the reaper run it again. ``trace``:
        the delivery's X-Ray header, kept on the job for the messages of its later attempts."""
        # One round trip: a two-phase kind's pending row is claimed at once, a single-UPDATE kind's run
        # is marked in flight, anything else is read.
        kinds = self._kinds
        job, started, claim = self._store.start(
            job_id, two_phase=kinds.two_phase, single=kinds.single, trace=trace
        )
        kind = kinds.get(job.kind)
        try:
            if claim is not None and kind is not None:
                return self._two_phase(claim, kind.handler, deadline)
            if started and kind is not None:
                return self._single(job, kind.handler, deadline)
            if kind is None and job.status == "pending":
                return self._no_handler(job)
        except AlreadyHandled as exc:
            self._info("job already handled", job_id, reason=str(exc))
            return Outcome.ALREADY_HANDLED
        except LostClaim as exc:
            if self._log is not None:
                self._log.error(
                    "job claim lost; result discarded", extra={"job_id": str(job_id), "reason": str(exc)}
                )
            return Outcome.LOST_CLAIM
        # the common duplicate: taken, finished or waiting for its retry; no handler ran
        self._info("job already handled", job_id, status=job.status)
        return Outcome.ALREADY_HANDLED

    def _single(self, job: Job, handler: Handler, deadline: float | None) -> Outcome:
        try:
            result = handler(job)
        except JobStoreUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - a job's failure is recorded in its row
            error, retry = _describe(exc), _retry(exc)
            failed = self._finish(
                lambda: self._store.fail_if_pending(job.id, error, attempt=job.attempt + 1, **retry),
                deadline,
            )
            return self._failed(job, exc, failed.status)
        stored = self._storable(job, result)
        self._finish(lambda: self._store.complete_if_pending(job.id, stored), deadline)
        return Outcome.COMPLETED

    def _two_phase(self, claim: Claim, handler: Handler, deadline: float | None) -> Outcome:
        try:
            result = handler(claim.job)
        except JobStoreUnavailable:
            raise  # the claim stays; the reaper takes it back after the lease
        except Exception as exc:  # noqa: BLE001 - a job's failure is recorded in its row
            error, retry = _describe(exc), _retry(exc)
            failed = self._finish(lambda: self._store.fail(claim, error, **retry), deadline)
            return self._failed(claim.job, exc, failed.status)
        stored = self._storable(claim.job, result)
        self._finish(lambda: self._store.commit(claim, stored), deadline)
        return Outcome.COMPLETED

    def _finish(self, transition: Callable[[], T], deadline: float | None) -> T:
        """The run's last transition, retried while the database is unavailable until ``deadline`` (at most
        10 s). Every transition is fenced (token or status), so retrying it never overwrites another run's
        outcome (docs/jobs.md says what a retry after a lost answer reports); not retrying would leave the
        claim to the reaper and run the handler again."""
        patience = time.monotonic() + COMMIT_PATIENCE_SECONDS  # one record never takes the whole batch's time
        until = patience if deadline is None else min(deadline, patience)
        pause = 0.05
        while True:
            try:
                return transition()
            except JobStoreUnavailable as exc:
                if time.monotonic() + pause >= until:
                    raise
                if self._log is not None:
                    self._log.warning("job's last transition failed; retrying", extra={"reason": str(exc)})
                self._sleep(pause)
                pause = min(2.0, pause * 2)

    def _storable(self, job: Job, result: Any) -> Any:
        """The result, or a note when jsonb cannot hold it: the job still completes (its side effect ran;
        failing the commit would have it run again)."""
        stored, problem = storable(result)
        if problem is not None and self._log is not None:
            self._log.error(
                "job result cannot be stored; completed with a note instead",
                extra={"job_id": str(job.id), "kind": job.kind, "reason": problem},
            )
        return stored

    def _no_handler(self, job: Job) -> Outcome:
        error = f"no handler is registered for job kind {job.kind!r}"
        self._store.fail_if_pending(job.id, error, attempt=job.attempt + 1, permanent=True)
        if self._log is not None:
            self._log.error(
                "job is dead: unknown kind",
                extra={EVENT: LogEvent.JOB_DEAD, "job_id": str(job.id), "kind": job.kind},
            )
        return Outcome.DEAD

    def _failed(self, job: Job, exc: Exception, status: str) -> Outcome:
        if self._log is not None:
            self._log.warning(
                "job failed" if status == "error" else "job is dead",
                extra={
                    **({EVENT: LogEvent.JOB_DEAD} if status == "dead" else {}),
                    "job_id": str(job.id),
                    "kind": job.kind,
                    "attempt": job.attempt,
                    "error": _describe(exc),
                },
            )
        return Outcome.DEAD if status == "dead" else Outcome.FAILED

    def _info(self, message: str, job_id: uuid.UUID, **extra: Any) -> None:
        if self._log is not None:
            self._log.info(message, extra={"job_id": str(job_id), **extra})


class _OutOfTime(Exception):  # noqa: N818 - internal: a record handed back to SQS untouched
    """The invocation is about to end: later records go back to SQS without being started."""


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises still gets recorded
        text = f"<{exc.__class__.__name__} whose message cannot be read>"
    return f"{exc.__class__.__name__}: {text}"


def _retry(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, RetryAfter):
        return {"retry_in": exc.seconds}
    return {"permanent": isinstance(exc, PermanentError)}


class JobConsumer:
    """The job-mode Lambda handler's logic: one SQS batch of job messages."""

    def __init__(
        self,
        worker: JobWorker,
        *,
        sqs: SQSClient,
        poison_queue_url: str,
        logger: Logger,
        metrics_sink: MetricSink,
        seal: Seal | None = None,
        lease_seconds: int | None = None,
    ) -> None:
        """``lease_seconds``: the reaper's lease; an invocation that could outlive it is refused (a
        claim reaped while its handler still runs could repeat a side effect)."""
        if not poison_queue_url:
            raise ValueError("a job consumer needs a poison queue (SLUICE_POISON_QUEUE_URL)")
        self._lease_ms = None if lease_seconds is None else lease_seconds * 1000
        self._worker = worker
        self._sqs = sqs
        self._poison = poison_queue_url
        self._log = logger
        self._metrics = metrics_sink
        self._seal = seal

    def handle(self, event: Mapping[str, Any], context: LambdaContext | None) -> dict[str, Any]:
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        if self._lease_ms is not None and callable(remaining) and remaining() >= self._lease_ms:
            raise ConfigurationError(
                f"SLUICE_JOB_LEASE_SECONDS ({self._lease_ms // 1000}) must exceed the job consumer's timeout"
                f" ({remaining() // 1000} s left in this invocation): the reaper could take back a claim"
                " whose handler is still running"
            )
        counts: Counter[str] = Counter()
        down: list[JobStoreUnavailable] = []
        # The last transition of a run may be retried until shortly before the invocation ends.
        deadline = (
            time.monotonic() + remaining() / 1000 - DEADLINE_RESERVE_SECONDS if callable(remaining) else None
        )

        def record_handler(record: SQSRecord) -> None:
            self._log.thread_safe_append_keys(message_id=record.message_id)
            try:
                self._record(self._arrive(record, counts), counts, down, deadline)
            except JobStoreUnavailable as exc:
                if exc.unreachable and not down:
                    down.append(exc)
                    self._log.error(
                        "job store unreachable; the batch's jobs go back to SQS", extra={"reason": str(exc)}
                    )
                elif not exc.unreachable:
                    self._log.warning(
                        "job store did not answer; the job goes back to SQS", extra={"reason": str(exc)}
                    )
                counts[metrics.JOB_STORE_UNAVAILABLE] += 1
                counts[metrics.JOB_MESSAGES_RETRIED] += 1
                raise
            except _OutOfTime:
                counts[metrics.JOB_MESSAGES_RETRIED] += 1
                raise
            except Exception:
                # A bug or a value nothing here expected: back to SQS (retried, then the job DLQ), never lost.
                self._log.exception("job message failed unexpectedly; it goes back to SQS")
                counts[metrics.JOB_MESSAGES_RETRIED] += 1
                raise
            finally:
                self._log.thread_safe_remove_keys(["message_id", "correlation_id"])

        response = each_record(event, record_handler, context=context)
        for name in metrics.JOB_CONSUMER_COUNTERS:
            self._metrics.add_metric(name=name, unit="Count", value=counts[name])
        self._log.info(
            "job batch done",
            extra={EVENT: LogEvent.JOB_BATCH_DONE, "records": len(event.get("Records", [])), **counts},
        )
        return response

    def _arrive(self, record: SQSRecord, counts: Counter[str]) -> Arrival:
        """The record read (its trace id on every log line about it); bookkeeping that failed its seal
        check is logged, counted in ``EnvelopesCorrupt`` and ignored, as on every hop."""
        arrival = Arrival.from_record(record, seal=self._seal)
        self._log.thread_safe_append_keys(correlation_id=arrival.correlation_id)
        if arrival.problem:
            self._log.warning(arrival.problem, extra={EVENT: LogEvent.ENVELOPE_CORRUPT})
            counts[metrics.ENVELOPES_CORRUPT] += 1
        return arrival

    def _record(
        self, arrival: Arrival, counts: Counter[str], down: list[JobStoreUnavailable], deadline: float | None
    ) -> None:
        if down:  # the database is unreachable: don't spend a connect timeout on every record
            raise JobStoreUnavailable(f"not tried: {down[0]}", unreachable=True)
        if deadline is not None and time.monotonic() >= deadline:  # handed back untouched, not half-run
            raise _OutOfTime("not started: too little of the invocation is left")
        try:
            outcome = self._worker.run(
                parse_job_message(arrival.body), deadline=deadline, trace=arrival.envelope.trace
            )
        except PermanentError as exc:  # malformed message or no such job: isolate, never retry
            self._reject(arrival, exc)
            counts[metrics.JOB_MESSAGES_REJECTED] += 1
            return
        counts[_METRIC[outcome]] += 1

    def _reject(self, arrival: Arrival, exc: PermanentError) -> None:
        """To the poison queue with the reason, on its trace (its ``AWSTraceHeader`` sent on with it),
        its ``source`` the queue it failed on."""
        poison_id = isolate(  # raises when it cannot: the record is retried, then dead-lettered by SQS
            self._sqs,
            poison_queue_url=self._poison,
            body=arrival.body,
            attributes=arrival.attributes,
            envelope=arrival.sourced_envelope.failed(exc, receives=arrival.receive_count),
            seal=self._seal,
        )
        self._log.error(
            "job message rejected to the poison queue",
            extra={
                EVENT: LogEvent.JOB_MESSAGE_REJECTED,
                "reason": str(exc)[:512],
                "error_type": exc.__class__.__name__,
                "poison_message_id": poison_id,
            },
        )
