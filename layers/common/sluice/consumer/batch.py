"""The partial-batch SQS consumer.

Per record: envelope → claim check → JSON (→ optional pydantic model) → the user's processor under
idempotency. Outcomes:

- success, or a duplicate (skipped, counted): Lambda deletes the record;
- :class:`~sluice.errors.PermanentError`, an undecodable or invalid body, a reused idempotency key, a
  body where the configured key path yields nothing (``SLUICE_IDEMPOTENCY_KEY_MISSING=poison``):
  sent at once to the poison queue with the envelope filled, and reported as success so it is not
  retried pointlessly;
- anything else (TransientError, RetryAfter, unexpected exceptions): the record's visibility is set
  to a capped full-jitter backoff (or exactly RetryAfter's seconds) and it is reported in
  ``batchItemFailures``. On its last receive (``maxReceiveCount``) a failing record is sent to the
  dead-letter queue by the consumer itself, with the error in its envelope (``SLUICE_DEAD_LETTER_QUEUE_URL``);
  should that send fail, the queue's redrive policy moves it there on the next receive.

A visibility heartbeat keeps every unfinished record of a slow batch invisible, and records of one
batch may be processed by a bounded thread pool (``SLUICE_CONCURRENCY``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, MutableMapping
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import BaseModel, ValidationError

from sluice import claimcheck, metrics
from sluice.arrival import Arrival, fallback_ids
from sluice.backoff import full_jitter
from sluice.consumer.deadline import Deadline
from sluice.consumer.fifo import dead_letter_fields, handing_back, partial_response
from sluice.consumer.heartbeat import Heartbeat, InFlight
from sluice.consumer.idempotency import Idempotency, InProgressElsewhere
from sluice.consumer.record import Processor, SluiceRecord, business_key, identity_key
from sluice.consumer.settings import ConsumerSettings
from sluice.consumer.stats import BatchStats
from sluice.envelope import Envelope, ErrorInfo, Seal, SendAttributes, merge
from sluice.errors import ConfigurationError, PermanentError, RetryAfter
from sluice.fit import fit
from sluice.limits import MAX_VISIBILITY_SECONDS
from sluice.logevents import EVENT, LogEvent
from sluice.partial import SqsRecord, is_fifo
from sluice.poison import isolate
from sluice.queuecheck import SourceQueueNeeds, check_source_queue
from sluice.sealing import load_seal
from sluice.sqs import queue_url_from_arn
from sluice.tracing import system_attributes
from sluice.workload_environment import apply as apply_workload_environment

if TYPE_CHECKING:
    import boto3
    from aws_lambda_powertools import Logger
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient

    from sluice.metrics import MetricSink


# Log messages, for people: tools select these lines by their event (sluice.logevents), not this text.


class Consumer:
    def __init__(
        self,
        processor: Processor,
        *,
        settings: ConsumerSettings,
        sqs: SQSClient,
        dynamodb: DynamoDBClient,
        s3: Callable[[], S3Client],
        logger: Logger,
        metrics_sink: MetricSink,
        seal: Seal | None,
        model: type[BaseModel] | None = None,
        name: str = "sluice",
    ) -> None:
        """``s3`` is a factory: the client is only built when a claim check first needs it. ``seal``
        checks and signs envelopes (:func:`sluice.sealing.load_seal`)."""
        self._processor = processor
        self._settings = settings
        self._seal = seal
        self._sqs = sqs
        self._s3_factory = s3
        self._s3: S3Client | None = None
        self._log = logger
        self._metrics = metrics_sink
        self._model = model
        self._idempotency = Idempotency(
            table=settings.idempotency_table,
            client=dynamodb,
            ttl_seconds=settings.idempotency_ttl_seconds,
            name=name,
        )
        self._key_expr: Any = None
        if settings.idempotency_key_jmespath:
            import jmespath  # noqa: PLC0415 - only when a key expression is configured

            self._key_expr = jmespath.compile(settings.idempotency_key_jmespath)
        self._urls: dict[str, str] = {}
        self._lock_wait = 0

    @classmethod
    def from_env(
        cls,
        processor: Processor,
        *,
        logger: Logger,
        metrics_sink: MetricSink,
        model: type[BaseModel] | None = None,
        environ: Mapping[str, str] | None = None,
        session: boto3.Session | None = None,
    ) -> Consumer:
        """Cold-start construction: validate ``SLUICE_*`` settings, build the clients."""
        env = os.environ if environ is None else environ
        settings = ConsumerSettings.from_env(env)
        if isinstance(env, MutableMapping):  # the workload's Environment, for the team's code
            apply_workload_environment(env)
        import boto3  # noqa: PLC0415 - keep the module importable without building clients

        # Without an explicit session, share boto3's default one: a second session would load the
        # endpoint and service data again (tens of milliseconds of cold start).
        client: Any = session.client if session is not None else boto3.client
        seal = load_seal(settings.envelope_key_secret, client=client("secretsmanager"))
        sqs = client("sqs")
        if settings.source_queue_url:  # refuse to start on a queue that would deliver twice or lose
            needs = SourceQueueNeeds(
                settings.visibility_timeout_seconds,
                settings.max_receive_count,
                settings.dead_letter_queue_url or None,
            )
            check_source_queue(sqs, settings.source_queue_url, needs)
        return cls(
            processor,
            settings=settings,
            sqs=sqs,
            dynamodb=client("dynamodb"),
            s3=lambda: client("s3"),
            logger=logger,
            metrics_sink=metrics_sink,
            seal=seal,
            model=model,
            name=env.get("AWS_LAMBDA_FUNCTION_NAME", "sluice-consumer"),
        )

    # --- batch ---------------------------------------------------------------------------------

    def handle(self, event: Mapping[str, Any], context: LambdaContext | None) -> dict[str, Any]:
        """Process one SQS event; returns ``{"batchItemFailures": [...]}``."""
        self._idempotency.register_lambda_context(context)
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        # An in-progress lock held by another invocation lives at most about one function timeout.
        self._lock_wait = int(remaining() // 1000) + 1 if callable(remaining) else 0
        records = list(event.get("Records", []))
        stats = BatchStats()
        in_flight = [
            InFlight(r["messageId"], r["receiptHandle"], self._queue_url(r["eventSourceARN"]))
            for r in records
        ]
        correlations: dict[str, str | None] = {}  # the heartbeat's thread logs without the record's keys
        heartbeat = Heartbeat(
            self._sqs,
            in_flight,
            visibility_timeout=self._settings.visibility_timeout_seconds,
            fraction=self._settings.heartbeat_fraction,
            batch_window=self._settings.batch_window_seconds,
            on_extended=lambda n: stats.add(metrics.VISIBILITY_EXTENDED, n),
            on_error=lambda mid, why: self._log.warning(
                why, extra={"message_id": mid, "correlation_id": correlations.get(mid)}
            ),
        )

        deadline = Deadline(
            remaining if callable(remaining) else None, max_receive_count=self._settings.max_receive_count
        )

        def record_handler(record: SqsRecord) -> None:
            if (margin := deadline.missed(record)) is not None:  # back soon, for an invocation with time
                heartbeat.settle(record.message_id)
                stats.add(metrics.RECORDS_DEFERRED)
                url, floor = self._queue_url(record.event_source_arn), self._settings.backoff_floor_seconds
                Deadline.hand_back(
                    self._sqs, url, record, visibility=math.ceil(floor), log=self._log, margin=margin
                )
            deadline.timed(lambda: self._handle_record(record, heartbeat, stats, correlations))

        skipped = handing_back(self._sqs, self._queue_url, heartbeat.settle, stats, log=self._log)  # FIFO
        with heartbeat:
            response = partial_response(event, record_handler, context, self._settings, on_skipped=skipped)
        for name in metrics.CONSUMER_COUNTERS:
            self._metrics.add_metric(name=name, unit="Count", value=stats.counts[name])
        self._log.info(
            "batch done",
            extra={
                EVENT: LogEvent.BATCH_DONE,
                "records": len(records),
                "failed": len(response["batchItemFailures"]),
                **stats.counts,
            },
        )
        return response

    # --- record --------------------------------------------------------------------------------

    def _handle_record(
        self, record: SqsRecord, heartbeat: Heartbeat, stats: BatchStats, correlations: dict[str, str | None]
    ) -> None:
        """Returns normally when the record is done (processed, duplicate, isolated); raises to retry it."""
        mid = record.message_id
        self._log.thread_safe_append_keys(message_id=mid)
        try:
            try:
                arrival = Arrival.from_record(record, seal=self._seal)
            except Exception as exc:  # noqa: BLE001 - unreadable attributes: retry, never drop
                unread = fallback_ids(record)
                correlations[mid] = unread.correlation_id
                self._log.thread_safe_append_keys(correlation_id=unread.correlation_id)
                self._retry_later(record, exc, stats, heartbeat, unread.receive_count)
            correlations[mid] = arrival.correlation_id
            if arrival.problem:  # logged with the trace the message goes on with (its corrupt one is dropped)
                stats.add(metrics.ENVELOPES_CORRUPT)
                self._log.warning(
                    arrival.problem,
                    extra={EVENT: LogEvent.ENVELOPE_CORRUPT, "correlation_id": arrival.correlation_id},
                )
            self._log.thread_safe_append_keys(correlation_id=correlations[mid])
            try:
                ran = self._process(arrival, stats)
            except PermanentError as exc:
                failure: Exception = exc
                try:
                    self._isolate(arrival, exc, stats)
                except Exception as isolation_error:  # noqa: BLE001 - not isolated: retried, never lost
                    self._log.error(
                        "permanent failure could not be isolated; retrying the record",
                        extra={"reason": str(exc)[:512], "error_type": exc.__class__.__name__},
                    )
                    failure = isolation_error
                else:
                    heartbeat.succeed(mid)  # reported as success: Lambda deletes it at batch end
                    return
                self._retry_later(record, failure, stats, heartbeat, arrival.receive_count)
            except Exception as exc:  # noqa: BLE001 - every other failure is retried with backoff
                if self._dead_letter(arrival, exc, stats):
                    heartbeat.succeed(mid)  # forwarded with its error: Lambda deletes it at batch end
                    return
                self._retry_later(record, exc, stats, heartbeat, arrival.receive_count)
            heartbeat.succeed(mid)
            stats.add(metrics.RECORDS_PROCESSED if ran else metrics.DUPLICATES_SKIPPED)
            if ran:
                self._log.debug("record processed", extra={EVENT: LogEvent.RECORD_PROCESSED})
            else:
                self._log.info("duplicate skipped", extra={EVENT: LogEvent.DUPLICATE_SKIPPED})
        finally:
            self._log.thread_safe_remove_keys(["message_id", "correlation_id"])

    def _process(self, arrival: Arrival, stats: BatchStats) -> bool:
        receives = arrival.receive_count
        if receives >= self._settings.max_receive_count - 1:
            stats.add(metrics.NEAR_DEAD_LETTER)
            self._log.warning(
                "record is near the dead-letter queue",
                extra={"receive_count": receives, "max_receive_count": self._settings.max_receive_count},
            )
        body = arrival.body
        pointer = claimcheck.parse_pointer(body)
        if pointer is not None:
            claimcheck.authorize(
                pointer, buckets=self._settings.claim_check_buckets, prefix=self._settings.claim_check_prefix
            )
            body = claimcheck.fetch(
                self._s3_client(), pointer, max_bytes=self._settings.claim_check_max_bytes
            )
            stats.add(metrics.CLAIM_CHECKS_RESOLVED)
        try:
            payload = json.loads(body)
        except ValueError as exc:
            raise PermanentError(f"body is not valid JSON: {exc}") from None
        data: Any = payload
        if self._model is not None:
            try:
                data = self._model.model_validate(payload)
            except ValidationError as exc:
                raise PermanentError(
                    f"body does not match {self._model.__name__}: "
                    + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
                ) from None
        key = self._key(payload, arrival.envelope, arrival.message_id, stats)
        sluice_record = SluiceRecord(
            message_id=arrival.message_id,
            body=body,
            data=data,
            attributes=arrival.attributes,
            envelope=arrival.envelope,
            receive_count=receives,
            idempotency_key=key,
            _idempotency=self._idempotency,
            _later=partial(self._later, arrival) if self._settings.delay_queue_url else None,
        )
        return self._idempotency.run(key, payload, lambda: self._processor(sluice_record))

    def _key(self, payload: Any, envelope: Envelope, message_id: str, stats: BatchStats) -> str:
        if self._key_expr is not None:
            key = business_key(payload, self._key_expr)
            if key is not None:
                return key
            self._key_missing(message_id, stats)  # raises PermanentError when configured to poison
        return identity_key(envelope.origin_id or message_id)

    def _key_missing(self, message_id: str, stats: BatchStats) -> None:
        """The configured key path found nothing: never silently keyed by identity instead."""
        s = self._settings
        stats.add(metrics.IDEMPOTENCY_KEY_MISSING)
        self._log.warning(
            "idempotency key path yields nothing in the body",
            extra={
                EVENT: LogEvent.IDEMPOTENCY_KEY_MISSING,
                "message_id": message_id,
                "key_path": s.idempotency_key_jmespath,
                "outcome": s.idempotency_key_missing,
            },
        )
        if s.idempotency_key_missing == "poison":
            raise PermanentError(
                f"idempotency key path {s.idempotency_key_jmespath!r} yields nothing in the body "
                "(SLUICE_IDEMPOTENCY_KEY_MISSING=poison; the stack parameters IdempotencyKeyJmesPath "
                "and IdempotencyKeyMissing set them)"
            )

    def _isolate(self, arrival: Arrival, exc: PermanentError, stats: BatchStats) -> None:
        failed = arrival.sourced_envelope.failed(exc, receives=arrival.receive_count)
        try:
            poison_id = isolate(
                self._sqs,
                poison_queue_url=self._settings.poison_queue_url,
                body=arrival.body,
                attributes=arrival.attributes,
                envelope=failed,
                seal=self._seal,
                offload=self._offload,
            )
        except Exception:
            # Not isolated, so not done: the caller retries the record rather than lose it.
            self._log.exception("poison isolation failed; record will be retried")
            raise
        stats.add(metrics.RECORDS_ISOLATED)
        self._log.error(
            "record isolated to the poison queue",
            extra={
                EVENT: LogEvent.RECORD_ISOLATED,
                "reason": failed.last_error.message if failed.last_error else "",
                "poison_message_id": poison_id,
                "error_type": exc.__class__.__name__,
                "attempts": failed.attempts,
            },
        )

    def _dead_letter(self, arrival: Arrival, exc: Exception, stats: BatchStats) -> bool:
        """On the last receive before the redrive policy would move the record, move it ourselves,
        with the error recorded in its envelope (SQS's own move cannot say why a message failed).

        ``attempts`` is left to the redriver, which counts every dead-lettered cycle the same way
        whichever path brought the message. ``source`` becomes the queue it failed on (its
        ``eventSourceARN``): SendMessage sets no ``DeadLetterQueueSourceArn``, and the first hop's
        source is the delay queue for a message that came through the long-delay pipeline.

        Returns False (the normal retry path, and SQS's own move) when not configured, not the last
        receive, another invocation holds the record, or the send fails.
        """
        s = self._settings
        receives = arrival.receive_count
        if (
            not s.dead_letter_queue_url
            or receives < s.max_receive_count
            or isinstance(exc, InProgressElsewhere)
        ):
            return False
        error = ErrorInfo.from_exception(exc, receives=receives)
        recorded = arrival.sourced_envelope.recording(error)
        try:
            fitted = fit(arrival.body, arrival.attributes, recorded, seal=self._seal, offload=self._offload)
            self._sqs.send_message(
                QueueUrl=s.dead_letter_queue_url,
                MessageBody=fitted.body,
                MessageAttributes=fitted.attributes,  # type: ignore[arg-type]
                MessageSystemAttributes=system_attributes(recorded.trace),  # type: ignore[arg-type]
                **dead_letter_fields(s.dead_letter_queue_url, arrival, recorded.group),
            )
        except Exception:  # noqa: BLE001 - the redrive policy still moves it, without the error
            self._log.warning(
                "could not dead-letter the record with its error; SQS will move it", exc_info=True
            )
            return False
        details = {
            "error_type": error.type,
            "error": error.message,
            "receive_count": receives,
            "fitted": list(fitted.changes),  # what was done to keep it within SQS's limits
        }
        stats.add(metrics.RECORDS_DEAD_LETTERED)
        self._log.error(
            "record dead-lettered with its last error",
            extra={EVENT: LogEvent.RECORD_DEAD_LETTERED, **details},
        )
        return True

    def _retry_later(
        self, record: SqsRecord, exc: Exception, stats: BatchStats, heartbeat: Heartbeat, receives: int
    ) -> NoReturn:
        """Give the record its backoff visibility for its ``receives``-th failure, then fail it (it
        lands in batchItemFailures)."""
        heartbeat.settle(record.message_id)
        s = self._settings
        if isinstance(exc, RetryAfter):
            delay = exc.seconds
        else:
            delay = full_jitter(
                receives,
                base=s.backoff_base_seconds,
                cap=s.backoff_cap_seconds,
                floor=s.backoff_floor_seconds,
            )
            if isinstance(exc, InProgressElsewhere):  # retrying before the other lock expires is wasted
                delay = max(delay, min(self._lock_wait, MAX_VISIBILITY_SECONDS))
        stats.add(metrics.RECORDS_FAILED)
        try:
            self._sqs.change_message_visibility(
                QueueUrl=self._queue_url(record.event_source_arn),
                ReceiptHandle=record.receipt_handle,
                VisibilityTimeout=delay,
            )
        except Exception:  # noqa: BLE001 - the record is still retried, after the queue's own timeout
            self._log.warning("could not set backoff visibility; the queue's timeout applies", exc_info=True)
        self._log.warning(
            "record failed; will be retried",
            extra={
                EVENT: LogEvent.RECORD_RETRIED,
                "error_type": exc.__class__.__name__,
                "error": str(exc)[:512],
                "retry_in_seconds": delay,
                "receive_count": receives,
            },
        )
        raise exc

    # --- helpers -------------------------------------------------------------------------------

    def _later(
        self,
        arrival: Arrival,
        body: str,
        *,
        delay_seconds: float | None,
        deliver_at: datetime | None,
        attributes: SendAttributes | None,
    ) -> str:
        """``record.later``: ``body`` to the queue ``arrival`` came from, through the delay queue."""
        from sluice.delay.schedule import send_delayed  # noqa: PLC0415 - only a processor asking loads it

        if is_fifo(target := self._queue_url(arrival.queue_arn or self._settings.source_queue_url)):
            raise ConfigurationError(f"record.later cannot deliver to a FIFO queue yet ({target}): issue 27")

        envelope = Envelope(trace=arrival.envelope.trace, traceparent=arrival.envelope.traceparent)
        traced = merge(dict(attributes or {}), envelope, body=body, seal=None)  # the record's trace goes on
        return send_delayed(
            self._sqs,
            delay_queue_url=self._settings.delay_queue_url,
            target=target,
            body=body,
            delay_seconds=delay_seconds,
            deliver_at=deliver_at,
            attributes=traced,
            group_id=arrival.group,  # the follow-up stays with the record's tenant (fair queues)
        )

    def _queue_url(self, arn: str) -> str:
        url = self._urls.get(arn)
        if url is None:
            url = self._urls[arn] = queue_url_from_arn(arn, endpoint=self._sqs.meta.endpoint_url)
        return url

    def _offload(self, body: str) -> tuple[str, SendAttributes]:
        """Store a body that no longer fits beside its envelope in the stack's claim-check bucket (the
        first of ``SLUICE_CLAIM_CHECK_BUCKETS``), under the claim-check prefix the consumer reads."""
        return self._settings.offloader(self._s3_client)(body)

    def _s3_client(self) -> S3Client:
        if self._s3 is None:
            self._s3 = self._s3_factory()
        return self._s3
