"""The one exception tree of sluice.

Business code raises these to tell the consumer what to do with a record:

- :class:`PermanentError`: retrying cannot help (bad data, business rule). The record goes to the
  poison queue at once, with the reason, and is not retried.
- :class:`TransientError`: a retry may succeed (downstream unavailable). The record is retried
  after a capped full-jitter backoff.
- :class:`RetryAfter`: a transient error whose caller knows when to retry (e.g. a 429 with
  ``Retry-After``). The record becomes visible again after exactly that many seconds.

Any other exception is treated as transient: it is retried and, when it keeps failing, lands in the
dead-letter queue through the queue's redrive policy. Nothing is dropped.
"""

from __future__ import annotations

from sluice.limits import MAX_VISIBILITY_SECONDS

__all__ = [
    "AlreadyHandled",
    "ConfigurationError",
    "InvalidEventError",
    "JobContention",
    "JobError",
    "JobNotFound",
    "JobStoreUnavailable",
    "LostClaim",
    "PermanentError",
    "RetryAfter",
    "SluiceError",
    "TransientError",
]


class SluiceError(Exception):
    """Root of every error sluice raises or understands."""


class ConfigurationError(SluiceError):
    """A setting is missing or invalid; raised at cold start, names the variable."""


class InvalidEventError(SluiceError, ValueError):
    """A handler was given an event it cannot interpret; the message names the shape it expected."""


class PermanentError(SluiceError):
    """Retrying cannot succeed: isolate the record in the poison queue."""


class TransientError(SluiceError):
    """A retry may succeed: back off and retry."""


class RetryAfter(TransientError):  # noqa: N818 - reads as an instruction: raise RetryAfter(30)
    """Retry after exactly ``seconds`` (0 to 12 hours)."""

    def __init__(self, seconds: int, reason: str = "") -> None:
        if not 0 <= seconds <= MAX_VISIBILITY_SECONDS:
            raise ValueError(f"RetryAfter seconds must be within 0..{MAX_VISIBILITY_SECONDS}, got {seconds}")
        self.seconds = int(seconds)
        super().__init__(reason or f"retry after {seconds}s")


class JobError(SluiceError):
    """A job-store transition did not happen; the subclass says why (see docs/jobs.md)."""


class AlreadyHandled(JobError):  # noqa: N818 - names the outcome, like the article's ErrAlreadyHandled
    """The job is no longer pending (another worker claimed or finished it, or it waits for its retry
    time): this delivery is a duplicate. Swallow it and delete the message."""


class LostClaim(JobError):  # noqa: N818 - names the outcome a fenced transition reports
    """The claim this worker held is gone (reaped after its lease, or the job moved on): the worker
    must not commit or fail the job; whoever holds the current claim owns it."""


class JobNotFound(PermanentError, JobError):  # noqa: N818 - reads as the fact it reports
    """A message names a job id the store does not have (forged, stale or for another database)."""


class JobStoreUnavailable(TransientError):  # noqa: N818 - reads as the fact it reports
    """The database could not be reached or did not answer in time: the message goes back to SQS.

    ``unreachable``: no statement can succeed now (no connection, no schema), so a batch's other records
    need not be tried; False for one statement's trouble (a lock or statement timeout, contention).
    """

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


class JobContention(JobStoreUnavailable):
    """A transition kept failing with a serialization failure or deadlock (SQLSTATE 40001 / 40P01)
    after its bounded retries."""
