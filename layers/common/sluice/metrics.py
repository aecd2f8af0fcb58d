"""Metric names (CloudWatch EMF through Powertools). Documented in docs/observability.md."""

from __future__ import annotations

from typing import Protocol

RECORDS_PROCESSED = "RecordsProcessed"
RECORDS_FAILED = "RecordsFailed"
RECORDS_DEFERRED = "RecordsDeferred"
RECORDS_HELD_BACK = "RecordsHeldBack"
RECORDS_ISOLATED = "RecordsIsolated"
DUPLICATES_SKIPPED = "DuplicatesSkipped"
CLAIM_CHECKS_RESOLVED = "ClaimChecksResolved"
VISIBILITY_EXTENDED = "VisibilityExtended"
NEAR_DEAD_LETTER = "NearDeadLetter"
RECORDS_DEAD_LETTERED = "RecordsDeadLettered"
ENVELOPES_CORRUPT = "EnvelopesCorrupt"
IDEMPOTENCY_KEY_MISSING = "IdempotencyKeyMissing"

MESSAGES_DELAYED = "MessagesDelayed"
MESSAGES_SENT_DIRECT = "MessagesSentDirect"
MESSAGES_REHYDRATED = "MessagesRehydrated"
DELAY_BUCKETS_STARTED = "DelayBucketsStarted"
DELAY_SCHEDULES_CREATED = "DelaySchedulesCreated"
DELIVERY_LAG_SECONDS = "DeliveryLagSeconds"
DELAYED_OBJECTS_SWEPT = "DelayedObjectsSwept"
DELAYED_OBJECTS_QUARANTINED = "DelayedObjectsQuarantined"

SUCCESSFUL_REDRIVES = "SuccessfulRedrives"
POISON_PILLS_ISOLATED = "PoisonPillsIsolated"
REDRIVE_FAILURES = "RedriveFailures"
BOUNCING_REDRIVES = "BouncingRedrives"
BREAKER_OPEN = "BreakerOpen"
REDRIVE_RUNS_SKIPPED = "RedriveRunsSkipped"

JOBS_COMPLETED = "JobsCompleted"
JOBS_FAILED = "JobsFailed"
JOBS_ALREADY_HANDLED = "JobsAlreadyHandled"
LOST_CLAIMS = "LostClaims"
JOBS_REAPED = "JobsReaped"
JOBS_RETRIED = "JobsRetried"
JOBS_REENQUEUED = "JobsReenqueued"
JOBS_DEAD = "JobsDead"
JOB_MESSAGES_REJECTED = "JobMessagesRejected"
JOB_STORE_UNAVAILABLE = "JobStoreUnavailable"
JOB_MESSAGES_RETRIED = "JobMessagesRetried"

CONSUMER_COUNTERS = (
    RECORDS_PROCESSED,
    RECORDS_FAILED,
    RECORDS_DEFERRED,
    RECORDS_HELD_BACK,
    RECORDS_ISOLATED,
    DUPLICATES_SKIPPED,
    CLAIM_CHECKS_RESOLVED,
    VISIBILITY_EXTENDED,
    NEAR_DEAD_LETTER,
    RECORDS_DEAD_LETTERED,
    ENVELOPES_CORRUPT,
    IDEMPOTENCY_KEY_MISSING,
)

JOB_CONSUMER_COUNTERS = (
    JOBS_COMPLETED,
    JOBS_FAILED,
    JOBS_DEAD,
    JOBS_ALREADY_HANDLED,
    LOST_CLAIMS,
    JOB_MESSAGES_REJECTED,
    JOB_STORE_UNAVAILABLE,
    JOB_MESSAGES_RETRIED,
    ENVELOPES_CORRUPT,
)


class MetricSink(Protocol):
    """What sluice needs of a metrics object; Powertools ``Metrics`` satisfies it."""

    def add_metric(self, name: str, unit: str, value: float) -> None: ...  # pragma: no cover
