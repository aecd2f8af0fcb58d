"""The batch-delay function: route each delayed message straight to its target or park it in S3.

Per invocation and due-time bucket: ONE S3 object, then ONE start of the bucket's delay state machine
execution (deterministic name and input: a second start for the same bucket is a no-op). Records that
cannot be handled now are reported in ``batchItemFailures`` (retried); invalid ones (unknown target,
due time unparseable, more than a year out or too far in the past) go to the poison queue.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sluice import metrics
from sluice.arrival import Arrival, fallback_ids
from sluice.batchsend import Outgoing, send_batch
from sluice.delay.schedule import (
    Parked,
    bucket_of,
    bucket_prefix,
    check_target,
    due_time,
    encode_object,
    execution_arn,
    execution_input,
    execution_name,
)
from sluice.delay.scheduler import Scheduling, plan
from sluice.delay.settings import DelaySettings
from sluice.envelope import Envelope, Seal, SendAttributes, split, utcnow
from sluice.errors import ConfigurationError, PermanentError
from sluice.fit import UnfittableError, fit
from sluice.logevents import EVENT, LogEvent
from sluice.poison import isolate
from sluice.tracing import valid_xray_header

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_scheduler import EventBridgeSchedulerClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

    from sluice.metrics import MetricSink


PARK_MARGIN_SECONDS = 1.0  # a bucket must still be at least this far from opening when written
PARKED_MAX_BYTES = 1 << 40  # a parked message lives in S3: only SQS's other rules apply until it is sent


def _by_target(planned: list[_Planned]) -> dict[str, list[_Planned]]:
    out: dict[str, list[_Planned]] = defaultdict(list)
    for p in planned:
        out[p.parked.target].append(p)
    return out


@dataclass
class _Planned:
    message_id: str
    parked: Parked
    correlation_id: str | None = None
    """Its trace's id, on every log line about it (:func:`sluice.tracing.correlation_id`)."""

    def ids(self) -> dict[str, str | None]:
        return {"message_id": self.message_id, "correlation_id": self.correlation_id}


class BatchDelay:
    def __init__(
        self,
        *,
        settings: DelaySettings,
        sqs: SQSClient,
        s3: S3Client,
        sfn: SFNClient,
        logger: Logger,
        metrics_sink: MetricSink,
        seal: Seal | None,
        clock: Callable[[], datetime] = utcnow,
        scheduler: EventBridgeSchedulerClient | None = None,
    ) -> None:
        """``scheduler``: required with ``SLUICE_DELAY_ORCHESTRATOR=scheduler`` (sluice.delay.scheduler)."""
        if not settings.delay_state_machine_arn.startswith("arn:") or ":stateMachine:" not in (
            settings.delay_state_machine_arn
        ):
            raise ConfigurationError("SLUICE_DELAY_STATE_MACHINE_ARN: a state machine ARN is required")
        self._s = settings
        self._sqs = sqs
        self._s3 = s3
        self._sfn = sfn
        self._log = logger
        self._metrics = metrics_sink
        self._seal = seal
        self._clock = clock
        scheduling = settings.delay_orchestrator == "scheduler"
        self._scheduling = Scheduling(settings, scheduler) if scheduling else None
        self._schedules_created = 0

    def handle(self, event: Mapping[str, Any], context: Any = None) -> dict[str, Any]:
        now = self._clock()
        failed: set[str] = set()
        direct: dict[str, list[_Planned]] = defaultdict(list)
        parked: dict[int, list[_Planned]] = defaultdict(list)
        isolated: set[str] = set()  # every path that isolates counts in RecordsIsolated
        self._schedules_created = 0
        for record in event.get("Records", []):
            mid = record["messageId"]
            try:
                arrival = Arrival.from_record(record, seal=self._seal)
            except Exception:  # noqa: BLE001 - unreadable attributes: this record retried, not the batch
                self._log.exception(
                    "could not read delayed message; retried", extra=fallback_ids(record).ids()
                )
                failed.add(mid)
                continue
            try:
                planned, due, is_direct = self._plan(arrival, now)
            except PermanentError as exc:
                if self._isolate(arrival, exc):
                    isolated.add(mid)
                else:
                    failed.add(mid)
                continue
            except Exception:  # noqa: BLE001 - e.g. the offload's PutObject: this record retried, not the batch
                self._log.exception("could not plan delayed message; retried", extra=arrival.ids())
                failed.add(mid)
                continue
            if is_direct:
                direct[planned.parked.target].append(planned)
            else:
                parked[bucket_of(due, self._s.delay_bucket_seconds)].append(planned)
        sent = self._send_direct(direct, now, failed, isolated)
        started, delayed, late = self._park(parked, failed, isolated)
        sent += late
        for name, value in (
            (metrics.MESSAGES_SENT_DIRECT, sent),
            (metrics.MESSAGES_DELAYED, delayed),
            (metrics.DELAY_BUCKETS_STARTED, started),
            *([(metrics.DELAY_SCHEDULES_CREATED, self._schedules_created)] if self._scheduling else []),
            (metrics.RECORDS_ISOLATED, len(isolated)),
        ):
            self._metrics.add_metric(name=name, unit="Count", value=value)
        self._log.info(
            "delay batch done",
            extra={"sent_direct": sent, "parked": delayed, "buckets_started": started,
                   "schedules_created": self._schedules_created, "isolated": len(isolated),
                   "failed": len(failed)},
        )  # fmt: skip
        return {"batchItemFailures": [{"itemIdentifier": mid} for mid in sorted(failed)]}

    def _plan(self, arrival: Arrival, now: datetime) -> tuple[_Planned, datetime, bool]:
        """(the message as it will be sent or parked, its due time, whether it is sent now)."""
        if arrival.problem:
            self._log.warning(arrival.problem, extra={EVENT: LogEvent.ENVELOPE_CORRUPT, **arrival.ids()})
            self._metrics.add_metric(name=metrics.ENVELOPES_CORRUPT, unit="Count", value=1)
        if not arrival.carried:
            raise PermanentError(
                arrival.problem or "delayed message has no sluice envelope (use sluice.delay.send_delayed)"
            )
        envelope, attributes, body = arrival.envelope, arrival.attributes, arrival.body
        target = check_target(envelope.target, self._s.delay_targets)
        due = due_time(envelope, now=now, grace_seconds=self._s.past_grace_seconds, sent_at=arrival.sent_at)
        is_direct = (due - now).total_seconds() <= self._s.direct_send_threshold_seconds
        try:  # within SQS's limits with the envelope it now carries (the body offloaded if need be)
            fitted = fit(
                body, attributes, envelope, seal=self._seal,
                # A parked request is only checked: its body stays inline in the parked object and is
                # offloaded when the rehydrator sends it, so no claim-check object can expire first.
                offload=self._offload if is_direct else self._s.rehearsal(),
            )  # fmt: skip
            if not is_direct:
                fitted = fit(body, attributes, envelope, seal=self._seal, max_bytes=PARKED_MAX_BYTES)
        except UnfittableError as exc:
            raise PermanentError(str(exc)) from exc
        message = Parked(arrival.message_id, target, due, fitted.body, fitted.attributes)
        return _Planned(arrival.message_id, message, arrival.correlation_id), due, is_direct

    def _send_direct(
        self, direct: dict[str, list[_Planned]], now: datetime, failed: set[str], isolated: set[str]
    ) -> int:
        sent = 0
        for target, planned in direct.items():
            outgoing: list[Outgoing] = []
            for p in planned:
                try:  # a request planned for parking (sent now after all) is offloaded here if need be
                    outgoing.append(p.parked.sendable(now, seal=self._seal, offload=self._offload)[0])
                except UnfittableError as exc:
                    if self._isolate_planned(p, str(exc)):
                        isolated.add(p.message_id)
                    else:
                        failed.add(p.message_id)
                except Exception:  # noqa: BLE001 - e.g. the offload's PutObject: retried, never lost
                    self._log.exception("could not send delayed message; will be retried", extra=p.ids())
                    failed.add(p.message_id)
            refused = send_batch(self._sqs, target, outgoing, clock=self._clock)
            records = {p.message_id: p for p in planned}
            for r in refused:
                if r.sender_fault and self._isolate_planned(records[r.message.key], f"{r.code}: {r.reason}"):
                    isolated.add(r.message.key)
                    continue  # the target will never take it as it is: poison, with the reason
                self._log.warning(
                    "direct send refused; will be retried",
                    extra={**records[r.message.key].ids(), "code": r.code, "reason": r.reason},
                )
                failed.add(r.message.key)
            sent += len(outgoing) - len(refused)
        return sent

    def _isolate_planned(self, planned: _Planned, reason: str) -> bool:
        user, envelope, problem = split(planned.parked.attributes, body=planned.parked.body, seal=self._seal)
        if problem:  # sealed by this invocation: never expected
            self._log.warning(problem, extra={EVENT: LogEvent.ENVELOPE_CORRUPT, **planned.ids()})
        base = envelope or Envelope(origin_id=planned.message_id)
        try:
            isolate(
                self._sqs,
                poison_queue_url=self._s.poison_queue_url,
                body=planned.parked.body,
                attributes=user,
                envelope=base.failed(PermanentError(f"target {planned.parked.target} refused: {reason}")),
                seal=self._seal,
                offload=self._offload,
            )
        except Exception:  # noqa: BLE001 - not isolated: retried, never lost
            self._log.exception("poison isolation failed", extra=planned.ids())
            return False
        self._log.error(
            "delayed message isolated to the poison queue",
            extra={EVENT: LogEvent.DELAYED_ISOLATED, **planned.ids(), "reason": reason},
        )
        return True

    def _park(
        self, parked: dict[int, list[_Planned]], failed: set[str], isolated: set[str]
    ) -> tuple[int, int, int]:
        """(executions started, messages parked, messages sent directly after all)."""
        started = delayed = direct = 0
        if self._scheduling is not None:  # inline in schedules; what does not fit goes on to S3
            now = self._clock()
            ready = [b for b in parked if b - now.timestamp() >= PARK_MARGIN_SECONDS]
            due = [p for b in sorted(ready) for p in parked.pop(b)]
            scheduled, rest = self._schedule(self._scheduling, due, now, failed)
            delayed += scheduled
            for p in rest:
                parked.setdefault(bucket_of(p.parked.due, self._s.delay_bucket_seconds), []).append(p)
        for bucket, planned in sorted(parked.items()):
            now = self._clock()
            if bucket - now.timestamp() < PARK_MARGIN_SECONDS:
                # This invocation ran long (retries): the bucket may open before its object lands.
                # Its messages are due within the threshold by now: send them directly instead.
                self._log.warning("bucket opens too soon to park; sending directly", extra={"bucket": bucket})
                direct += self._send_direct(_by_target(planned), now, failed, isolated)
                continue
            # Deterministic key: a retried batch rewrites its object instead of parking a second copy.
            digest = hashlib.sha256("\n".join(sorted(p.message_id for p in planned)).encode()).hexdigest()[
                :32
            ]
            key = f"{bucket_prefix(self._s.delay_prefix, bucket)}{digest}.json"
            try:
                self._s3.put_object(
                    Bucket=self._s.delay_bucket,
                    Key=key,
                    Body=encode_object(bucket, [p.parked for p in planned]),
                    ContentType="application/json",
                )
                started += self._ensure_execution(bucket, _first_trace(planned))
            except Exception:  # noqa: BLE001 - retried by SQS; a parked copy is delivered once by idempotency
                self._log.exception(
                    "could not park bucket; records will be retried", extra={"bucket": bucket}
                )
                failed.update(p.message_id for p in planned)
                continue
            delayed += len(planned)
        return started, delayed, direct

    def _schedule(
        self, scheduling: Scheduling, planned: list[_Planned], now: datetime, failed: set[str]
    ) -> tuple[int, list[_Planned]]:
        """(messages scheduled, messages too large for a schedule's input: parked in S3 instead)."""
        by_key = {p.message_id: p for p in planned}
        try:
            layout = plan([p.parked for p in planned], now, self._s.delay_bucket_seconds)
        except Exception:  # noqa: BLE001 - never expected (the parker checked the due times): retried
            self._log.exception(
                "could not plan delay schedules; records retried", extra={"message_ids": sorted(by_key)}
            )
            failed.update(by_key)
            return 0, []
        scheduled = 0
        for spec in layout.schedules:
            try:
                created = scheduling.create(spec)
            except Exception:  # noqa: BLE001 - throttled, denied, ...: these records retried, not the batch
                self._log.exception(
                    "could not create delay schedule; its records will be retried",
                    extra={"schedule": spec.name, "message_ids": list(spec.keys)},
                )
                failed.update(spec.keys)
                continue
            self._schedules_created += created
            if not created:
                self._log.info(
                    "delay schedule already exists (a redelivered batch): not created twice",
                    extra={"schedule": spec.name, "message_ids": list(spec.keys)},
                )
            scheduled += len(spec.keys)
        for parked in layout.unschedulable:
            self._log.info(
                "delayed message too large for a schedule's input; parked in S3 for the state machine",
                extra={**by_key[parked.key].ids(), "due": parked.due.isoformat()},
            )
        return scheduled, [by_key[p.key] for p in layout.unschedulable]

    def _ensure_execution(self, bucket: int, trace: str | None = None) -> int:
        """1 when this call started the bucket's execution, 0 when it already existed.

        A StartExecution with the same name and input as a running execution is itself a no-op in
        Step Functions; the DescribeExecution first (an API call, not a state transition: no cost)
        tells the two apart for the metric, and catches a bucket whose execution already finished
        (its new object is then delivered by the sweep, and a warning says so).
        """
        name = execution_name(bucket)
        arn = execution_arn(self._s.delay_state_machine_arn, name)
        try:
            status = self._sfn.describe_execution(executionArn=arn)["status"]
        except self._sfn.exceptions.ExecutionDoesNotExist:
            status = None
        if status == "RUNNING":
            if self._clock().timestamp() >= bucket:
                self._log.warning(
                    "bucket already open while parking; the sweep will deliver anything it missed",
                    extra={"bucket": bucket},
                )
            return 0
        if status is not None:
            self._log.warning(
                "bucket execution already finished; the sweep will deliver the new object",
                extra={"bucket": bucket, "execution_status": status},
            )
            return 0
        try:
            self._sfn.start_execution(
                stateMachineArn=self._s.delay_state_machine_arn,
                name=name,
                input=execution_input(self._s.delay_prefix, bucket),
                # the bucket's execution joins the trace of its first message (one trace header per
                # execution; every message keeps its own in its envelope and its AWSTraceHeader)
                **({"traceHeader": trace} if trace else {}),
            )
        except self._sfn.exceptions.ExecutionAlreadyExists:
            return 0  # started concurrently by another invocation
        return 1

    def _offload(self, body: str) -> tuple[str, SendAttributes]:
        return self._s.offloader(lambda: self._s3)(body)

    def _isolate(self, arrival: Arrival, exc: PermanentError) -> bool:
        try:
            isolate(
                self._sqs,
                poison_queue_url=self._s.poison_queue_url,
                body=arrival.body,
                attributes=arrival.attributes,
                envelope=arrival.envelope.failed(exc, receives=arrival.receive_count),
                seal=self._seal,
                offload=self._offload,
            )
        except Exception:  # noqa: BLE001 - not isolated: retried, never lost
            self._log.exception("poison isolation failed", extra=arrival.ids())
            return False
        self._log.error(
            "delayed message isolated to the poison queue",
            extra={EVENT: LogEvent.DELAYED_ISOLATED, **arrival.ids(), "reason": str(exc)},
        )
        return True


def _first_trace(planned: list[_Planned]) -> str | None:
    """The X-Ray header a bucket's execution continues: its first message's that has a valid one."""
    for p in planned:
        _, envelope, _ = split(p.parked.attributes, body=p.parked.body, seal=None)
        if envelope is not None and valid_xray_header(envelope.trace):
            return envelope.trace
    return None
