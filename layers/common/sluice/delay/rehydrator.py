"""The rehydrator: send the messages parked for a due-time bucket, then delete their objects.

Invoked by the bucket's delay state machine execution (``{"bucket", "prefix"}``) or by the scheduled
sweep (``{"sweep": true}``), which rehydrates every bucket whose time has passed by more than the
grace (stragglers, failed executions). Every message is sent with its residual ``DelaySeconds`` so it
arrives on time to the second. An object is deleted only once every message in it was accepted; when
only part of it was, the object is rewritten with the rest, so a retry neither loses nor repeats
what was sent. Messages SQS refuses as malformed go to the poison queue with the reason. The
rehydrator stops before its deadline and answers ``more: true`` so the state machine calls it again.

One object never holds back the others: an unreadable object is moved to ``<prefix>quarantine/``
(error log, ``DelayedObjectsQuarantined`` metric and alarm) and a message its target keeps refusing
is isolated to the poison queue after ``MAX_SEND_CYCLES`` rehydration cycles.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sluice import metrics
from sluice.batchsend import Outgoing, send_batch
from sluice.delay.contracts import RehydrateResult
from sluice.delay.schedule import Parked, bucket_prefix, check_target, decode_object, encode_object
from sluice.delay.settings import DelaySettings
from sluice.envelope import Envelope, Seal, SendAttributes, split, utcnow
from sluice.errors import InvalidEventError, PermanentError, TransientError
from sluice.fit import UnfittableError
from sluice.logevents import EVENT, LogEvent
from sluice.poison import isolate
from sluice.tracing import correlation_id

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient

    from sluice.metrics import MetricSink

SAFETY_MILLIS = 10_000  # stop this long before the Lambda deadline
MAX_SEND_CYCLES = 5  # rehydration cycles a target may refuse a message before it goes to poison
QUARANTINE = "quarantine/"  # under the delay prefix; never swept (not a bucket number)


class Rehydrator:
    def __init__(
        self,
        *,
        settings: DelaySettings,
        sqs: SQSClient,
        s3: S3Client,
        logger: Logger,
        metrics_sink: MetricSink,
        seal: Seal | None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._s = settings
        self._seal = seal
        self._sqs = sqs
        self._s3 = s3
        self._log = logger
        self._metrics = metrics_sink
        self._clock = clock

    def handle(self, event: Mapping[str, Any], context: Any = None) -> RehydrateResult:
        remaining: Callable[[], int] = getattr(context, "get_remaining_time_in_millis", lambda: 900_000)
        stats: dict[str, float] = defaultdict(float)
        try:
            if "scheduled" in event:  # a delay schedule's messages, inline (sluice.delay.scheduler)
                more = self._scheduled(event, stats)
            elif event.get("sweep") or is_scheduled_event(event):  # a plain schedule means a sweep
                more = self._sweep(remaining, stats)
            else:
                prefix = event.get("prefix")
                if not isinstance(prefix, str):
                    raise InvalidEventError(
                        "the rehydrator expects {'bucket': <int>, 'prefix': 'delayed/<bucket>/'} from the "
                        "delay state machine, {'scheduled', 'parked'} from a delay schedule, "
                        "{'sweep': true}, or a scheduled event; got keys "
                        f"{sorted(map(str, event))[:10]}"
                    )
                if not prefix.startswith(self._s.delay_prefix) or QUARANTINE in prefix:
                    raise PermanentError(f"prefix {prefix!r} is not a bucket under {self._s.delay_prefix!r}")
                more = self._rehydrate(prefix, remaining, stats)
        finally:  # what was done is counted even when an object fails
            for name in (
                metrics.MESSAGES_REHYDRATED,
                metrics.DELAYED_OBJECTS_SWEPT,
                metrics.RECORDS_ISOLATED,
                metrics.DELAYED_OBJECTS_QUARANTINED,
                metrics.ENVELOPES_CORRUPT,
            ):
                self._metrics.add_metric(name=name, unit="Count", value=stats[name])
            if stats["lag_count"]:
                self._metrics.add_metric(
                    name=metrics.DELIVERY_LAG_SECONDS, unit="Seconds", value=stats["lag_max"]
                )
        result: RehydrateResult = {
            "more": more,
            "sent": int(stats[metrics.MESSAGES_REHYDRATED]),
            "objects": int(stats["objects"]),
        }
        self._log.info(
            "rehydration done", extra={**result, "swept": int(stats[metrics.DELAYED_OBJECTS_SWEPT])}
        )
        return result

    # --- one bucket ----------------------------------------------------------------------------

    def _rehydrate(self, prefix: str, remaining: Callable[[], int], stats: dict[str, float]) -> bool:
        """Every object of the prefix; one failing object never holds back the others."""
        kept: list[str] = []
        paginator = self._s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self._s.delay_bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                if remaining() < SAFETY_MILLIS:
                    return True
                try:
                    self._object(obj["Key"], stats)
                except TransientError as exc:
                    kept.append(str(exc))
        if kept:
            raise TransientError(f"{len(kept)} object(s) under {prefix} kept for a retry; first: {kept[0]}")
        return False

    def _object(self, key: str, stats: dict[str, float]) -> None:
        data = self._s3.get_object(Bucket=self._s.delay_bucket, Key=key)["Body"].read()
        try:
            messages = decode_object(data)
        except (ValueError, KeyError, TypeError) as exc:
            self._quarantine(key, data, str(exc), stats)
            return
        now = self._clock()
        unsent = self._send(key, messages, now, stats)
        if unsent:
            bucket = int(key.rstrip("/").split("/")[-2]) if key.count("/") >= 2 else 0
            self._s3.put_object(Bucket=self._s.delay_bucket, Key=key, Body=encode_object(bucket, unsent))
            raise TransientError(f"{len(unsent)} message(s) of {key} not accepted yet; kept for the retry")
        self._s3.delete_object(Bucket=self._s.delay_bucket, Key=key)
        stats["objects"] += 1

    def _quarantine(self, key: str, data: bytes, reason: str, stats: dict[str, float]) -> None:
        """Never delete what cannot be read, and never let it block its bucket: move it aside, loudly."""
        target = f"{self._s.delay_prefix}{QUARANTINE}{key[len(self._s.delay_prefix) :]}"
        self._s3.put_object(Bucket=self._s.delay_bucket, Key=target, Body=data)
        self._s3.delete_object(Bucket=self._s.delay_bucket, Key=key)
        stats[metrics.DELAYED_OBJECTS_QUARANTINED] += 1
        self._log.error(
            "unreadable parked object quarantined",
            extra={"key": key, "quarantined_as": target, "reason": reason},
        )

    def _send(self, key: str, messages: list[Parked], now: datetime, stats: dict[str, float]) -> list[Parked]:
        by_target: dict[str, list[Parked]] = defaultdict(list)
        for message in messages:
            by_target[message.target].append(message)
        by_key = {m.key: m for m in messages}
        unsent: list[Parked] = []
        for target, group in by_target.items():
            outgoing: list[Outgoing] = []
            for message in group:
                try:  # offloaded now if it no longer fits beside its envelope
                    out, problem = message.sendable(now, seal=self._seal, offload=self._offload)
                except UnfittableError as exc:
                    if not self._refused(message, str(exc), key, stats):
                        unsent.append(replace(message, tries=message.tries + 1))
                    continue
                except Exception:  # noqa: BLE001 - e.g. the offload's PutObject: kept for the retry
                    self._log.exception(
                        "could not prepare a parked message; kept for the retry",
                        extra=self._ids(key, message),
                    )
                    unsent.append(message)
                    continue
                if problem:  # sealed when parked: the key rotated twice since (docs/envelope.md)
                    self._log.warning(
                        problem, extra={EVENT: LogEvent.ENVELOPE_CORRUPT, **self._ids(key, message)}
                    )
                    stats[metrics.ENVELOPES_CORRUPT] += 1
                outgoing.append(out)
            refused_keys = set()
            for r in send_batch(self._sqs, target, outgoing, clock=self._clock):
                message = by_key[r.message.key]
                refused_keys.add(message.key)
                reason = f"{r.code}: {r.reason}"
                exhausted = message.tries + 1 >= MAX_SEND_CYCLES
                if (r.sender_fault or exhausted) and self._refused(message, reason, key, stats):
                    continue
                self._log.warning(
                    "target refused a parked message; kept for the retry",
                    extra={**self._ids(key, message), "target": target, "reason": reason,
                           "tries": message.tries + 1},
                )  # fmt: skip
                unsent.append(replace(message, tries=message.tries + 1))
            for out in outgoing:
                if out.key in refused_keys:
                    continue
                stats[metrics.MESSAGES_REHYDRATED] += 1
                lag = max(0.0, (now - by_key[out.key].due).total_seconds())
                stats["lag_max"] = max(stats["lag_max"], lag)
                stats["lag_count"] += 1
        return unsent

    def _refused(self, message: Parked, reason: str, key: str, stats: dict[str, float]) -> bool:
        """Isolated to the poison queue (and counted); False when that failed too (kept for the retry)."""
        if not self._isolate(message, reason, key):
            return False
        stats[metrics.RECORDS_ISOLATED] += 1
        return True

    def _ids(self, key: str, message: Parked) -> dict[str, str | None]:
        """The parked object and message a log line is about, and the message's ``correlation_id``."""
        _, envelope, _ = split(message.outgoing(self._clock()).attributes, body=message.body, seal=self._seal)
        cid = correlation_id(envelope.traceparent, envelope.trace) if envelope is not None else None
        return {"key": key, "parked_message": message.key, "correlation_id": cid}

    def _offload(self, body: str) -> tuple[str, SendAttributes]:
        return self._s.offloader(lambda: self._s3)(body)

    def _isolate(self, message: Parked, reason: str, key: str) -> bool:
        user, envelope, problem = split(
            message.outgoing(self._clock()).attributes, body=message.body, seal=self._seal
        )
        if problem:  # sealed when parked: the key rotated twice since (docs/envelope.md)
            self._log.warning(problem, extra={EVENT: LogEvent.ENVELOPE_CORRUPT, **self._ids(key, message)})
        base = envelope or Envelope(origin_id=message.key, target=message.target, deliver_at=message.due)
        try:
            isolate(
                self._sqs,
                poison_queue_url=self._s.poison_queue_url,
                body=message.body,
                attributes=user,
                envelope=base.failed(
                    PermanentError(f"target {message.target} refused the message: {reason}")
                ),
                seal=self._seal,
                offload=self._offload,
            )
        except Exception:  # noqa: BLE001 - not isolated: stays parked for the retry
            self._log.exception("poison isolation failed", extra=self._ids(key, message))
            return False
        self._log.error(
            "parked message isolated to the poison queue",
            extra={
                EVENT: LogEvent.PARKED_ISOLATED,
                **self._ids(key, message),
                "target": message.target,
                "reason": reason,
            },
        )
        return True

    # --- a delay schedule's inline messages ------------------------------------------------------

    def _scheduled(self, event: Mapping[str, Any], stats: dict[str, float]) -> bool:
        """Send a schedule's messages with their residual delay, now. What its target did not accept is
        parked in S3 under its bucket (the sweep delivers it, retried, poisoned after
        ``MAX_SEND_CYCLES``); a message for a queue outside the allowlist goes to the poison queue."""
        name, parked = event.get("scheduled"), event.get("parked")
        if not isinstance(name, str) or not isinstance(parked, dict):
            raise InvalidEventError("a delay schedule's input is {'scheduled': <name>, 'parked': {...}}")
        try:
            messages = decode_object(json.dumps(parked).encode())
            bucket = int(parked["bucket"])
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidEventError(f"delay schedule {name}: unreadable messages: {exc}") from exc
        key = f"schedule:{name}"
        allowed: list[Parked] = []
        for message in messages:
            try:
                check_target(message.target, self._s.delay_targets)
            except PermanentError as exc:
                if not self._refused(message, str(exc), key, stats):
                    raise TransientError(f"{key}: could not isolate {message.key}") from exc
                continue
            allowed.append(message)
        unsent = self._send(key, allowed, self._clock(), stats)
        if unsent:  # for the sweep: a retry of this invocation would resend what was accepted
            kept = f"{bucket_prefix(self._s.delay_prefix, bucket)}{name}.json"
            self._s3.put_object(Bucket=self._s.delay_bucket, Key=kept, Body=encode_object(bucket, unsent))
            self._log.warning(
                "targets did not accept every scheduled message; the rest is parked for the sweep",
                extra={"schedule": name, "unsent": len(unsent), "key": kept},
            )
        stats["objects"] += 1
        return False

    # --- sweep ---------------------------------------------------------------------------------

    def _sweep(self, remaining: Callable[[], int], stats: dict[str, float]) -> bool:
        """Rehydrate every bucket that opened more than the grace ago and still holds objects."""
        horizon = self._clock().timestamp() - self._s.past_grace_seconds
        kept: list[str] = []
        paginator = self._s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(
            Bucket=self._s.delay_bucket, Prefix=self._s.delay_prefix, Delimiter="/"
        ):
            for common in page.get("CommonPrefixes", []):
                name = common["Prefix"][len(self._s.delay_prefix) :].rstrip("/")
                if not name.isdigit() or int(name) + self._s.delay_bucket_seconds > horizon:
                    continue
                before = stats["objects"]
                try:
                    more = self._rehydrate(bucket_prefix(self._s.delay_prefix, int(name)), remaining, stats)
                except TransientError as exc:
                    kept.append(str(exc))
                    more = False
                stats[metrics.DELAYED_OBJECTS_SWEPT] += stats["objects"] - before
                if more:
                    return True
        if kept:
            raise TransientError(f"sweep left {len(kept)} bucket(s) for the next run; first: {kept[0]}")
        return False


def is_scheduled_event(event: Mapping[str, Any]) -> bool:
    """An EventBridge (or EventBridge Scheduler) scheduled event, as a rule without Input sends it."""
    return event.get("detail-type") == "Scheduled Event" or event.get("source") == "aws.scheduler"
