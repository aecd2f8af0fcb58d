"""``--fast``: small values of real template parameters, so backoffs, dead-lettering, long delays and
redrives happen in seconds through the very same code paths as in AWS (see docs/local.md).

Its own module so that ``__main__``, the demo and the tests share it without importing each other.
"""

from __future__ import annotations

FAST = {
    "ConsumerTimeoutSeconds": "10",
    "BackoffBaseSeconds": "1",
    "BackoffCapSeconds": "2",
    "MaxReceiveCount": "3",
    "MaximumBatchingWindowInSeconds": "0",
    "MaximumConcurrency": "2",
    "LogLevel": "INFO",
    # Long delays in seconds: the direct-send threshold that is 900 s in AWS, 2 s buckets, a sweep
    # every 3 s with 3 s of grace (local-only seconds rates, see docs/local.md).
    "DirectSendThresholdSeconds": "6",
    "DelayBucketSeconds": "2",
    "DelayPastGraceSeconds": "3",
    "DelaySweepRate": "rate(3 seconds)",
    "DelayBatchSize": "10",
    "DelayBatchingWindowInSeconds": "0",
    # DLQ redrive in seconds: backoff uniform(1, min(4, 2^attempt)) s, two redrives before a message
    # is isolated, a backstop run every 5 s (local-only seconds rate), 10 messages/s; a message back
    # within a minute of its redrive counts as bouncing.
    "RedriveMaxAttempts": "2",
    "RedriveBaseSeconds": "1",
    "RedriveCapSeconds": "4",
    "RedriveFloorSeconds": "1",
    "RedriveMaxPerSecond": "10",
    "RedriveBackstopRate": "rate(5 seconds)",
    "BreakerCooldownSeconds": "60",
    # The job store in seconds (used when a database is attached): a 5 s job consumer, claims taken
    # back after 6 s, retries after uniform(1, min(2, 2^(n-1))) s, reaper and sweeper every 2 s, a pending
    # job without a message enqueued again after 8 s.
    "JobConsumerTimeoutSeconds": "5",
    "JobLeaseSeconds": "6",
    "JobBackoffBaseSeconds": "1",
    "JobBackoffCapSeconds": "2",
    "JobMaintenanceRate": "rate(2 seconds)",
    "JobOrphanSeconds": "8",
}
