"""The job reaper and the job retry sweeper (scheduled functions).

- ``reap``: claims older than the lease go back to pending (or to dead on their last attempt) —
  fenced on the token read, so a job that committed meanwhile stays completed — and the pending ones
  are enqueued again.
- ``sweep``: error rows whose retry time has come go back to pending and are enqueued; pending rows
  nobody touched for ``orphan_seconds`` (their message was lost, or an earlier enqueue failed) are
  enqueued again. Messages go out in SendMessageBatch chunks of ten.

An enqueue SQS refuses leaves its row pending: the next sweep finds it as an orphan. Nothing is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from sluice import metrics
from sluice.batchsend import Outgoing, send_batch
from sluice.jobs.rows import Requeue
from sluice.jobs.worker import job_message

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger
    from mypy_boto3_sqs import SQSClient

    from sluice.jobs.store import JobStore
    from sluice.metrics import MetricSink

__all__ = ["JobMaintenance", "MaintenanceReport"]

RESERVE_MS = 10_000
"""Stop taking new rows when less than this much of the invocation is left."""


@dataclass
class MaintenanceReport:
    reaped: int = 0
    dead: int = 0
    retried: int = 0
    reenqueued: int = 0
    not_enqueued: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class JobMaintenance:
    def __init__(
        self,
        store: JobStore,
        *,
        sqs: SQSClient,
        queue_url: str,
        logger: Logger,
        metrics_sink: MetricSink,
        lease_seconds: int,
        orphan_seconds: int,
        limit: int = 500,
        migrate_schema: Callable[[], object] | None = None,
    ) -> None:
        """``migrate_schema`` runs before the first run (the scheduled functions bring the schema up to
        date, idempotently, so a fresh deployment needs no manual step)."""
        if not queue_url:
            raise ValueError("the job queue URL is required to re-enqueue jobs (SLUICE_JOB_QUEUE_URL)")
        self._store = store
        self._sqs = sqs
        self._queue_url = queue_url
        self._log = logger
        self._metrics = metrics_sink
        self._lease = lease_seconds
        self._orphan = orphan_seconds
        self._limit = limit
        self._migrate = migrate_schema

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str], *, logger: Logger, metrics_sink: MetricSink
    ) -> JobMaintenance:
        """Cold start of the reaper and the sweeper: validated ``SLUICE_*`` settings, the store (its
        connection opens on first use, its migrations run before the first run), the SQS client."""
        import boto3  # noqa: PLC0415 - keep the module importable without building clients

        from sluice.jobs.connection import Connector  # noqa: PLC0415
        from sluice.jobs.settings import JobSettings  # noqa: PLC0415
        from sluice.jobs.store import JobStore  # noqa: PLC0415

        settings = JobSettings.from_env(environ)
        name = environ.get("AWS_LAMBDA_FUNCTION_NAME", "sluice-job-maintenance")
        store = JobStore.from_settings(
            settings, Connector.from_settings(settings, application_name=name), worker=name
        )
        return cls(
            store,
            sqs=boto3.client("sqs"),
            queue_url=settings.job_queue_url,
            logger=logger,
            metrics_sink=metrics_sink,
            lease_seconds=settings.job_lease_seconds,
            orphan_seconds=settings.job_orphan_seconds,
            limit=settings.job_sweep_limit,
            migrate_schema=store.migrate,
        )

    def _ready(self) -> None:
        if self._migrate is not None:
            applied = self._migrate()
            if applied:
                self._log.info("job store migrations applied", extra={"versions": applied})
            self._migrate = None

    def reap(self, remaining_ms: Callable[[], int] | None = None) -> MaintenanceReport:
        self._ready()
        report = MaintenanceReport()
        while True:
            reaped = self._store.reap(self._lease, limit=self._limit)
            report.reaped += len(reaped.pending)
            report.dead += len(reaped.dead)
            if reaped.dead:
                self._log.error(
                    "jobs dead: their last attempt's claim expired",
                    extra={"job_ids": [str(i) for i in reaped.dead[:50]]},
                )
            self._enqueue([Requeue(i, reaped.traces.get(i)) for i in reaped.pending], report)
            if len(reaped.pending) + len(reaped.dead) < self._limit or _out_of_time(remaining_ms):
                break
        self._metrics.add_metric(name=metrics.JOBS_REAPED, unit="Count", value=report.reaped)
        self._metrics.add_metric(name=metrics.JOBS_DEAD, unit="Count", value=report.dead)
        self._log.info("reaper done", extra=report.to_dict())
        return report

    def sweep(self, remaining_ms: Callable[[], int] | None = None) -> MaintenanceReport:
        self._ready()
        report = MaintenanceReport()
        while True:
            due = self._store.due_for_retry(limit=self._limit)
            report.retried += len(due)
            self._enqueue(due, report)
            if len(due) < self._limit or _out_of_time(remaining_ms):
                break
        while not _out_of_time(remaining_ms):
            lost = self._store.orphans(self._orphan, limit=self._limit)
            report.reenqueued += len(lost)
            if lost:
                self._log.warning("pending jobs without a message enqueued again", extra={"count": len(lost)})
            self._enqueue(lost, report)
            if len(lost) < self._limit:
                break
        self._metrics.add_metric(name=metrics.JOBS_RETRIED, unit="Count", value=report.retried)
        self._metrics.add_metric(name=metrics.JOBS_REENQUEUED, unit="Count", value=report.reenqueued)
        self._log.info("retry sweeper done", extra=report.to_dict())
        return report

    def _enqueue(self, jobs: list[Requeue], report: MaintenanceReport) -> None:
        """A message for each job, on the job's trace (its ``AWSTraceHeader``): every attempt of a job
        lands on the trace of the delivery that first ran it."""
        if not jobs:
            return
        refused = send_batch(
            self._sqs,
            self._queue_url,
            [Outgoing(key=str(job.id), body=job_message(job.id), trace=job.trace) for job in jobs],
        )
        if refused:
            keys = [r.message.key for r in refused]
            report.not_enqueued.extend(keys)
            self._log.error(
                "jobs not enqueued; they stay pending and the next sweep enqueues them",
                extra={"job_ids": keys[:50], "reason": refused[0].reason[:300], "code": refused[0].code},
            )


def _out_of_time(remaining_ms: Callable[[], int] | None) -> bool:
    return remaining_ms is not None and remaining_ms() < RESERVE_MS
