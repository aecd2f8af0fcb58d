"""The redriver: drain a dead-letter queue back to its sources with backoff, velocity and a breaker.

One run (a Lambda invocation triggered by the DLQ depth alarm through SNS, or by the backstop
schedule, or the operator CLI):

0. take the workload's run lease (:mod:`sluice.redrive.lease`): held by another live run → end at
   once (``another_run``), so the DLQ drains at one run's velocity; renew it before every batch
   (and before each piece of a long pacing wait), release it at the end;
1. check the circuit breaker before every batch: open → stop without touching a message;
2. long-poll the DLQ for a batch (10, fewer when the velocity is below 10 messages/s);
3. decide every message with :func:`sluice.redrive.decide` (the Step Functions mode's Plan step
   uses the same function): re-drive to its source with ``DelaySeconds``, through the long-delay
   pipeline when the backoff exceeds the direct-send threshold, or isolate it as a poison pill;
4. send with ``SendMessageBatch`` per destination (≤ 10 entries per request);
5. ``DeleteMessageBatch`` only the entries accepted downstream: the others stay in the DLQ and come
   back after the receive's visibility timeout for the next run;
6. report the batch's bounce counts to the breaker; pace to at most ``max_per_second`` messages per
   second; stop before the Lambda deadline.

SQS requests per re-driven message: 3 per batch of 10 (receive, send, delete), plus the one empty
receive that tells the queue is drained. At-least-once: a crash between the send and the delete
re-drives a message twice; its envelope keeps ``origin_id``, so the consumer's idempotency absorbs
the duplicate.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sluice import metrics
from sluice.backoff import Uniform
from sluice.batchsend import Outgoing, send_batch
from sluice.envelope import Seal, utcnow
from sluice.errors import ConfigurationError
from sluice.fit import Offload
from sluice.groups import sendable_group
from sluice.limits import MAX_BATCH_ENTRIES
from sluice.logevents import EVENT, LogEvent
from sluice.partial import is_fifo
from sluice.redrive.breaker import Breaker, BreakerState, BreakerStatus, report
from sluice.redrive.contracts import BreakerAnswer, OtherRun, RunReport
from sluice.redrive.lease import HeldLease, Refusal, RunLease
from sluice.redrive.plan import TRACE_ATTRIBUTE, Decision, DlqMessage, decide
from sluice.redrive.settings import FIFO_NOT_REDRIVEN, RedriveSettings
from sluice.sqs import queue_url_from_arn
from sluice.tracing import correlation_id

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger
    from mypy_boto3_sqs import SQSClient

    from sluice.metrics import MetricSink

SAFETY_MILLIS = 10_000
"""Stop a run this long (plus the long-poll wait) before the Lambda deadline."""
RECEIVE_VISIBILITY_SECONDS = 60
"""How long a received DLQ message stays hidden while its batch is handled (or after a failure)."""


@dataclass
class RedriveReport:
    received: int = 0
    redriven: int = 0
    delayed: int = 0
    isolated: int = 0
    failed: int = 0
    bouncing: int = 0
    batches: int = 0
    stopped: str = ""
    """Why the run ended: drained, breaker_open, deadline, limit, another_run or lease_lost."""
    breaker: BreakerAnswer | None = None
    """The last breaker check (None when the run failed before its first)."""
    elapsed_seconds: float = 0.0
    other_run: OtherRun | None = None
    """another_run: the run holding the lease (who, and until when)."""

    def to_dict(self) -> RunReport:
        return {
            "received": self.received,
            "redriven": self.redriven,
            "delayed": self.delayed,
            "isolated": self.isolated,
            "failed": self.failed,
            "bouncing": self.bouncing,
            "batches": self.batches,
            "stopped": self.stopped,
            "breaker": None if self.breaker is None else BreakerAnswer(**self.breaker),
            "elapsed_seconds": self.elapsed_seconds,
            "other_run": None if self.other_run is None else OtherRun(**self.other_run),
        }


class Redriver:
    """Drains one DLQ. ``lease``: the workload's run lease, taken by every run (the Lambda and the CLI
    pass one; None runs without it, as a test or a benchmark on a queue of its own may)."""

    def __init__(
        self,
        *,
        settings: RedriveSettings,
        sqs: SQSClient,
        breaker: Breaker,
        logger: Logger,
        metrics_sink: MetricSink,
        seal: Seal | None,
        offload: Offload | None = None,
        lease: RunLease | None = None,
        clock: Callable[[], datetime] = utcnow,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        uniform: Uniform = random.uniform,
    ) -> None:
        self._s = settings
        self._sqs = sqs
        self._breaker = breaker
        self._log = logger
        self._metrics = metrics_sink
        self._seal = seal
        self._offload = offload
        self._lease = lease
        self._clock = clock
        self._monotonic = monotonic
        self._sleep = sleep
        self._uniform = uniform
        self._urls: dict[str, str] = {}
        if (
            settings.redrive_cap_seconds > settings.direct_send_threshold_seconds
            and not settings.delay_queue_url
        ):
            # else every backoff beyond the threshold would fail at run time and stay in the DLQ
            raise ConfigurationError(
                f"SLUICE_DELAY_QUEUE_URL is required: SLUICE_REDRIVE_CAP_SECONDS "
                f"({settings.redrive_cap_seconds:g}) exceeds SLUICE_DIRECT_SEND_THRESHOLD_SECONDS "
                f"({settings.direct_send_threshold_seconds})"
            )

    def run(
        self,
        remaining_millis: Callable[[], int] | None = None,
        *,
        max_messages: int | None = None,
        max_per_second: float | None = None,
        holder: str = "",
    ) -> RedriveReport:
        """Re-drive until the DLQ is drained, the breaker opens, the deadline nears or the limit.

        ``holder`` names this run in the lease (who a run that finds it held is told about)."""
        rate = self._s.redrive_max_per_second if max_per_second is None else max_per_second
        if rate <= 0:
            raise ValueError(f"max_per_second must be positive, got {rate}")
        report_ = RedriveReport()
        start = self._monotonic()
        if is_fifo(self._s.dead_letter_queue_url):  # not yet: DelaySeconds and no deduplication id (issue 27)
            self._log.error(FIFO_NOT_REDRIVEN, extra={"dead_letter_queue": self._s.dead_letter_queue_url})
            report_.stopped = "fifo_not_redriven"
            return report_
        lease = None
        if self._lease is not None:
            taken = self._lease.acquire(holder, seconds=self._s.receive_wait_seconds)
            if isinstance(taken, Refusal):
                return self._skipped(report_, taken, start)
            lease = taken
        try:
            self._drain(report_, remaining_millis or (lambda: 900_000), rate, max_messages, lease)
        finally:
            report_.elapsed_seconds = round(self._monotonic() - start, 3)
            for name, value in (
                (metrics.SUCCESSFUL_REDRIVES, report_.redriven + report_.delayed),
                (metrics.POISON_PILLS_ISOLATED, report_.isolated),
                (metrics.REDRIVE_FAILURES, report_.failed),
                (metrics.BOUNCING_REDRIVES, report_.bouncing),
            ):
                self._metrics.add_metric(name=name, unit="Count", value=value)
            if lease is not None:
                self._release(lease)
        self._log.info("redrive run finished", extra={EVENT: LogEvent.RUN_FINISHED, **report_.to_dict()})
        return report_

    def _drain(
        self,
        report_: RedriveReport,
        remaining: Callable[[], int],
        rate: float,
        max_messages: int | None,
        lease: HeldLease | None,
    ) -> None:
        """The run's batches, until a reason to stop (``report_.stopped``)."""
        per_batch = max(1, min(MAX_BATCH_ENTRIES, int(rate)))
        paced_from = self._monotonic()
        handled = 0
        while True:
            status = self._breaker.check()
            report(status, self._metrics)
            report_.breaker = answer = status.to_dict()
            if status.is_open:
                self._log.warning("circuit breaker is open: nothing is re-driven", extra=answer)
                report_.stopped = "breaker_open"
                return
            if max_messages is not None and report_.received >= max_messages:
                report_.stopped = "limit"
                return
            # Velocity, a token bucket holding at most one batch: the next batch may start once
            # `handled / rate` seconds have passed since `paced_from`, so in any stretch of t
            # seconds at most rate·t + one batch are re-driven.
            wait = paced_from + handled / rate - self._monotonic()
            budget_ms = SAFETY_MILLIS + 1000 * (self._s.receive_wait_seconds + max(0.0, wait))
            if remaining() <= budget_ms:  # no time left beyond the budget: not even a millisecond
                report_.stopped = "deadline"
                return
            if not self._wait(wait, lease):
                self._log.warning(
                    "another redrive run took over the lease: this one stops (a batch that stalled "
                    "past the lease, or clocks further apart than its margin)",
                    extra={EVENT: LogEvent.LEASE_LOST, "batches": report_.batches},
                )
                report_.stopped = "lease_lost"
                return
            want = per_batch if max_messages is None else min(per_batch, max_messages - report_.received)
            messages = self._receive(want)
            if not messages:
                report_.stopped = "drained"
                return
            # Time spent waiting on a quiet queue (a long poll) is no credit for a burst later. The
            # receive's time, logged with each send, is read at the same moment as the pacing's: read
            # later (in the batch), a thread descheduled in between logged it later than it was paced.
            received, paced_from = self._clock(), max(paced_from, self._monotonic() - handled / rate)
            self._batch(messages, report_, status, received)
            handled += len(messages)

    def _wait(self, wait: float, lease: HeldLease | None) -> bool:
        """Sleep the pacing wait with the lease kept so that it outlasts the wait and the long poll and
        leaves time for the batch. A renewal covers at most the lease's ``max_stretch`` (so that no
        expiry is written further ahead than a taker believes possible): a longer wait is slept in
        pieces, the lease kept before each. False when another run has taken the lease over."""
        if lease is None:
            if wait > 0:
                self._sleep(wait)
            return True
        poll = self._s.receive_wait_seconds
        piece_max = max(1.0, lease.max_stretch - poll)
        while True:
            piece = min(max(0.0, wait), piece_max)
            if not lease.keep(min(piece + poll, lease.max_stretch)):
                return False
            if piece > 0:
                self._sleep(piece)
            wait -= piece
            if wait <= 0:
                return True

    def _skipped(self, report_: RedriveReport, refusal: Refusal, start: float) -> RedriveReport:
        """Another run holds the lease: end at once, touching nothing (``RedriveRunsSkipped``)."""
        until = None if refusal.expires is None else datetime.fromtimestamp(refusal.expires, UTC).isoformat()
        report_.stopped = "another_run"
        report_.other_run = {"holder": refusal.holder, "until": until}
        report_.elapsed_seconds = round(self._monotonic() - start, 3)
        self._metrics.add_metric(name=metrics.REDRIVE_RUNS_SKIPPED, unit="Count", value=1)
        self._log.info(
            "another redrive run in progress: this one ends without re-driving",
            extra={EVENT: LogEvent.RUN_SKIPPED, "holder": refusal.holder, "lease_expires": until},
        )
        return report_

    def _release(self, lease: HeldLease) -> None:
        try:
            lease.release()
        except Exception as exc:  # noqa: BLE001 - never masks the run's own outcome; the lease expires
            self._log.warning(
                "could not release the redrive lease: the next run takes it once it expires",
                extra={"error_type": exc.__class__.__name__, "error": str(exc)[:512]},
            )

    # --- one batch -----------------------------------------------------------------------------

    def _receive(self, count: int) -> list[DlqMessage]:
        response = self._sqs.receive_message(
            QueueUrl=self._s.dead_letter_queue_url,
            MaxNumberOfMessages=count,
            WaitTimeSeconds=self._s.receive_wait_seconds,
            VisibilityTimeout=RECEIVE_VISIBILITY_SECONDS,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
        )
        return [DlqMessage.from_api(m) for m in response.get("Messages", [])]

    def _batch(
        self, messages: list[DlqMessage], report_: RedriveReport, status: BreakerStatus, now: datetime
    ) -> None:
        """One received batch; ``now`` is its paced receive's time (logged with each send)."""
        report_.batches += 1
        report_.received += len(messages)
        half_open = status.state is BreakerState.HALF_OPEN
        # a half-open breaker past its hold judges by failures that happened after the probe
        failed_after = (
            datetime.fromtimestamp(status.probe_at, UTC)
            if half_open and status.probe_at is not None
            else None
        )
        decisions: list[Decision] = []
        for message in messages:
            try:
                decision = decide(
                    message,
                    self._s,
                    now=now,
                    url_of=self._url,
                    seal=self._seal,
                    offload=self._offload,
                    failed_after=failed_after,
                    uniform=self._uniform,
                )
            except Exception as exc:  # noqa: BLE001 - left in the DLQ for the next run, never lost
                report_.failed += 1
                self._log.exception(
                    "could not plan a dead-lettered message; it stays in the DLQ",
                    extra={
                        "message_id": message.message_id,
                        "correlation_id": correlation_id(None, message.system.get(TRACE_ATTRIBUTE)),
                        "error_type": exc.__class__.__name__,
                    },
                )
                continue
            if decision.envelope_problem:
                self._metrics.add_metric(name=metrics.ENVELOPES_CORRUPT, unit="Count", value=1)
                self._log.warning(
                    decision.envelope_problem, extra={EVENT: LogEvent.ENVELOPE_CORRUPT, **decision.ids()}
                )
            decisions.append(decision)
        bouncing = sum(d.bouncing for d in decisions)
        report_.bouncing += bouncing
        dues = [d.due_at.timestamp() for d in decisions if d.due_at is not None]
        self._breaker.observe(
            seen=len(decisions),
            bouncing=bouncing,
            fresh=sum(d.fresh for d in decisions),
            latest_due=max(dues) if dues else None,
        )
        if half_open:
            probe = failed_after is None
            role = "the probe" if probe else "judged by failures after the probe"
            self._log.info(
                f"breaker half-open: this batch is {role}",
                extra={EVENT: LogEvent.BREAKER_HALF_OPEN, "probe": probe, "size": len(decisions)},
            )
        accepted = self._send(decisions, report_, now)
        self._delete([d for d in decisions if d.message_id in accepted], report_)

    def _send(self, decisions: list[Decision], report_: RedriveReport, now: datetime) -> set[str]:
        """Send per destination; returns the message ids accepted downstream."""
        groups: dict[str, list[Decision]] = defaultdict(list)
        for d in decisions:
            groups[d.destination].append(d)
        by_id = {d.message_id: d for d in decisions}
        accepted: set[str] = set()
        retry_as_poison: list[Decision] = []
        for destination, group in groups.items():
            refused = send_batch(
                self._sqs,
                destination,
                [
                    Outgoing(
                        d.message_id,
                        d.body,
                        d.attributes,
                        d.send_delay_seconds,
                        trace=d.envelope.trace,
                        group=sendable_group(d.envelope.group),
                    )
                    for d in group
                ],
                sleep=self._sleep,
            )
            refused_ids = {r.message.key: r for r in refused}
            for d in group:
                r = refused_ids.get(d.message_id)
                if r is None:
                    accepted.add(d.message_id)
                    self._done(d, report_, now)
                elif r.sender_fault and d.action != "poison":  # the source will never take it
                    retry_as_poison.append(
                        d.refused(
                            f"{r.code}: {r.reason}",
                            poison_queue_url=self._s.poison_queue_url,
                            now=now,
                            seal=self._seal,
                            offload=self._offload,
                        )
                    )
                else:
                    report_.failed += 1
                    self._log.error(
                        "send refused; the message stays in the DLQ for the next run",
                        extra={
                            EVENT: LogEvent.SEND_REFUSED,
                            **d.ids(),
                            "attempt": d.attempt,
                            "code": r.code,
                            "reason": r.reason,
                        },
                    )
        if retry_as_poison:
            refused = send_batch(
                self._sqs,
                self._s.poison_queue_url,
                [
                    Outgoing(
                        d.message_id,
                        d.body,
                        d.attributes,
                        trace=d.envelope.trace,
                        group=sendable_group(d.envelope.group),
                    )
                    for d in retry_as_poison
                ],
                sleep=self._sleep,
            )
            still = {r.message.key for r in refused}
            for d in retry_as_poison:
                if d.message_id in still:
                    report_.failed += 1
                    self._log.error(
                        "neither the source nor the poison queue took the message; it stays in the DLQ",
                        extra={**d.ids(), "attempt": by_id[d.message_id].attempt},
                    )
                else:
                    accepted.add(d.message_id)
                    self._done(d, report_, now)
        return accepted

    def _done(self, d: Decision, report_: RedriveReport, received: datetime) -> None:
        extra = {
            **d.ids(),
            "origin_id": d.envelope.origin_id,
            "attempt": d.attempt,
            "action": d.action,
            "delay_seconds": d.delay_seconds,
            "bouncing": d.bouncing,
            "received_at": received.isoformat(),  # the velocity limit paces the receives
        }
        if d.action == "poison":
            report_.isolated += 1
            error = d.envelope.last_error
            self._log.error(
                "message isolated to the poison queue",
                extra={
                    EVENT: LogEvent.MESSAGE_ISOLATED,
                    **extra,
                    "reason": d.reason[:512],
                    "error_type": error.type if error else None,
                },
            )
            return
        if d.action == "delay":
            report_.delayed += 1
        else:
            report_.redriven += 1
        self._log.info(
            "message re-driven", extra={EVENT: LogEvent.MESSAGE_REDRIVEN, **extra, "reason": d.reason[:512]}
        )

    def _delete(self, decisions: list[Decision], report_: RedriveReport) -> None:
        for start in range(0, len(decisions), MAX_BATCH_ENTRIES):
            chunk = decisions[start : start + MAX_BATCH_ENTRIES]
            response = self._sqs.delete_message_batch(
                QueueUrl=self._s.dead_letter_queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": d.receipt_handle} for i, d in enumerate(chunk)],
            )
            for failure in response.get("Failed", []):
                d = chunk[int(failure["Id"])]
                report_.failed += 1
                self._log.warning(
                    "re-driven but not deleted from the DLQ: it will be re-driven again, "
                    "and the consumer's idempotency absorbs the duplicate",
                    extra={
                        **d.ids(),
                        "code": failure.get("Code"),
                        "reason": failure.get("Message"),
                    },
                )

    def _url(self, arn: str) -> str:
        url = self._urls.get(arn)
        if url is None:
            url = self._urls[arn] = queue_url_from_arn(arn, endpoint=self._sqs.meta.endpoint_url)
        return url
