"""The job-mode Lambda handler's logic: one SQS batch of job messages, started, run and committed as a
batch (:meth:`sluice.jobs.worker.JobWorker.run_batch`).

Three passes over the batch: each record is read (its seal checked, its job id parsed); the batch's jobs
are started in one statement, their handlers run and their successes committed in one fenced statement;
then each record gets its outcome through the partial-batch loop (``batchItemFailures`` names those that
go back to SQS: the job store unavailable, or too little of the invocation left to start them). A record
that names no job goes to the poison queue in that last pass, on its own trace.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sluice import metrics
from sluice.arrival import Arrival
from sluice.envelope import Seal
from sluice.errors import ConfigurationError, JobStoreUnavailable, PermanentError
from sluice.jobs.worker import Delivery, JobWorker, Outcome, OutOfTime, Result, parse_job_message
from sluice.logevents import EVENT, LogEvent
from sluice.partial import SqsRecord, each_record
from sluice.poison import isolate

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_sqs import SQSClient

    from sluice.metrics import MetricSink

__all__ = ["DEADLINE_RESERVE_SECONDS", "JobConsumer"]

DEADLINE_RESERVE_SECONDS = 1.5
"""Left of an invocation after the last retry of a run's last transition (the batch still has to answer)."""

_METRIC = {
    Outcome.COMPLETED: metrics.JOBS_COMPLETED,
    Outcome.FAILED: metrics.JOBS_FAILED,
    Outcome.DEAD: metrics.JOBS_DEAD,
    Outcome.ALREADY_HANDLED: metrics.JOBS_ALREADY_HANDLED,
    Outcome.LOST_CLAIM: metrics.LOST_CLAIMS,
}


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
        # The last transition of a run may be retried until shortly before the invocation ends.
        deadline = (
            time.monotonic() + remaining() / 1000 - DEADLINE_RESERVE_SECONDS if callable(remaining) else None
        )
        records = list(event.get("Records", []))
        arrivals, results = self._batch(records, counts, deadline)
        position = iter(range(len(records)))  # one record at a time, in the event's order
        down: list[JobStoreUnavailable] = []

        def record_handler(record: SqsRecord) -> None:
            i = next(position)
            arrival = arrivals[i]
            self._log.thread_safe_append_keys(message_id=record.message_id)
            if arrival is not None:
                self._log.thread_safe_append_keys(correlation_id=arrival.correlation_id)
            try:
                self._settle(arrival, results[i], counts)
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
            except OutOfTime:
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
            extra={EVENT: LogEvent.JOB_BATCH_DONE, "records": len(records), **counts},
        )
        return response

    def _batch(
        self, records: list[Any], counts: Counter[str], deadline: float | None
    ) -> tuple[list[Arrival | None], list[Result | None]]:
        """Each record read, then the jobs they name run as one batch: what each record came to."""
        arrivals: list[Arrival | None] = []
        results: list[Result | None] = []
        jobs: dict[int, uuid.UUID] = {}  # the records that name a job to run, by position
        for i, raw in enumerate(records):
            arrival, read = self._read(SqsRecord(raw), counts)
            arrivals.append(arrival)
            results.append(None if isinstance(read, uuid.UUID) else read)
            if isinstance(read, uuid.UUID):
                jobs[i] = read
        if deadline is not None and time.monotonic() >= deadline:  # handed back untouched, not half-run
            return arrivals, [OutOfTime("not started: too little of the invocation is left") for _ in records]
        self._run(jobs, arrivals, results, deadline)
        return arrivals, results

    def _read(self, record: SqsRecord, counts: Counter[str]) -> tuple[Arrival | None, uuid.UUID | Result]:
        """A record read and its job id parsed: ``(arrival, job id)`` when it names a job to run, else what
        it came to (a malformed message: the error that sends it to the poison queue)."""
        self._log.thread_safe_append_keys(message_id=record.message_id)
        try:
            arrival = self._arrive(record, counts)
        except Exception as exc:  # noqa: BLE001 - raised in the record's own pass (logged, retried)
            return None, exc
        finally:
            self._log.thread_safe_remove_keys(["message_id", "correlation_id"])
        try:
            return arrival, parse_job_message(arrival.body)
        except PermanentError as exc:
            return arrival, exc

    def _run(
        self,
        jobs: dict[int, uuid.UUID],
        arrivals: list[Arrival | None],
        results: list[Result | None],
        deadline: float | None,
    ) -> None:
        """The batch's jobs, started, run and committed together; each record's result filled in."""
        if not jobs:
            return
        todo, deliveries = list(jobs), []
        for i, job_id in jobs.items():
            arrival = arrivals[i]
            assert arrival is not None  # noqa: S101 - only read records are to run
            keys = {"message_id": arrival.message_id}
            if arrival.correlation_id is not None:
                keys["correlation_id"] = arrival.correlation_id
            deliveries.append(Delivery(job_id, arrival.envelope.trace, keys))
        try:
            ran: list[Result] = self._worker.run_batch(deliveries, deadline=deadline)
        except Exception as exc:  # noqa: BLE001 - the batch never started: every record of it goes back
            ran = [exc] * len(todo)
        for i, result in zip(todo, ran, strict=True):
            results[i] = result

    def _settle(self, arrival: Arrival | None, result: Result | None, counts: Counter[str]) -> None:
        """A record's result counted, its rejection sent to the poison queue, or its error raised."""
        if isinstance(result, Outcome):
            counts[_METRIC[result]] += 1
            return
        if isinstance(result, PermanentError) and arrival is not None:  # malformed or no such job
            self._reject(arrival, result)
            counts[metrics.JOB_MESSAGES_REJECTED] += 1
            return
        if result is None:
            raise AssertionError("a record of the batch has no result")  # pragma: no cover
        raise result

    def _arrive(self, record: SqsRecord, counts: Counter[str]) -> Arrival:
        """The record read (its trace id on every log line about it); bookkeeping that failed its seal
        check is logged, counted in ``EnvelopesCorrupt`` and ignored, as on every hop."""
        arrival = Arrival.from_record(record, seal=self._seal)
        self._log.thread_safe_append_keys(correlation_id=arrival.correlation_id)
        if arrival.problem:
            self._log.warning(arrival.problem, extra={EVENT: LogEvent.ENVELOPE_CORRUPT})
            counts[metrics.ENVELOPES_CORRUPT] += 1
        return arrival

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
