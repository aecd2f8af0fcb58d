"""Settings of the job store and its functions (``SLUICE_*`` variables; see docs/jobs.md)."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from sluice.jobs import defaults
from sluice.limits import MAX_VISIBILITY_SECONDS
from sluice.sealing import SealSettings
from sluice.settings import EnvSettings

__all__ = ["JobConsumerSettings", "JobSettings", "JobStoreSettings"]

Isolation = Literal["read committed", "repeatable read", "serializable"]


class JobStoreSettings(EnvSettings):
    """Where the database is and how the store talks to it."""

    database_url: str = ""
    """A libpq DSN (``postgresql://user@host:5432/db``); local runs and tests. Production uses the secret."""
    database_secret_arn: str = ""
    """A Secrets Manager secret holding a DSN, or the RDS JSON form (host, port, username, password,
    dbname)."""
    database_secret_max_age_seconds: int = Field(default=300, ge=0, le=86_400)
    jobs_schema: str = Field(default=defaults.SCHEMA, pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    behind_proxy: bool = False
    """Behind RDS Proxy: no libpq command-line options (the proxy refuses them); set the timeouts in the
    proxy's initialization query instead (docs/jobs.md)."""
    statement_timeout_ms: int = Field(default=defaults.STATEMENT_TIMEOUT_MS, ge=0, le=3_600_000)
    lock_timeout_ms: int = Field(default=defaults.LOCK_TIMEOUT_MS, ge=0, le=3_600_000)
    connect_timeout_seconds: int = Field(default=defaults.CONNECT_TIMEOUT_SECONDS, ge=1, le=60)
    job_isolation: Isolation = defaults.ISOLATION
    job_serialization_retries: int = Field(default=defaults.SERIALIZATION_RETRIES, ge=0, le=100)
    """Retries of a transition that failed with SQLSTATE 40001 or 40P01 before it surfaces as an error."""
    job_backoff_base_seconds: float = Field(default=defaults.BACKOFF_BASE_SECONDS, gt=0, le=30 * 86_400)
    job_backoff_cap_seconds: float = Field(default=defaults.BACKOFF_CAP_SECONDS, gt=0, le=30 * 86_400)
    job_max_attempts: int = Field(default=defaults.MAX_ATTEMPTS, ge=1, le=1000)
    """Default max_attempts of jobs created without one."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if not (self.database_url or self.database_secret_arn):
            raise ValueError("set SLUICE_DATABASE_SECRET_ARN (or SLUICE_DATABASE_URL for local runs)")
        if self.job_backoff_base_seconds > self.job_backoff_cap_seconds:
            raise ValueError(
                f"SLUICE_JOB_BACKOFF_BASE_SECONDS ({self.job_backoff_base_seconds}) exceeds "
                f"SLUICE_JOB_BACKOFF_CAP_SECONDS ({self.job_backoff_cap_seconds})"
            )
        return self


class JobSettings(JobStoreSettings):
    """The job consumer, reaper and sweeper."""

    job_queue_url: str = Field(default="", pattern=r"^(https?://.+)?$")
    """Where the reaper and the sweeper re-enqueue job ids (the job consumer's queue)."""
    poison_queue_url: str = Field(default="", pattern=r"^(https?://.+)?$")
    """Where the job consumer sends messages that name no valid job (forged or malformed)."""
    job_lease_seconds: int = Field(default=defaults.LEASE_SECONDS, ge=1, le=MAX_VISIBILITY_SECONDS)
    """How long a claim may run before the reaper takes it back. Must exceed the job consumer's timeout."""
    job_orphan_seconds: int = Field(default=900, ge=1, le=MAX_VISIBILITY_SECONDS)
    """A pending row untouched this long has lost its message: the sweeper enqueues it again."""
    job_sweep_limit: int = Field(default=500, ge=1, le=10_000)
    """Rows the reaper and the sweeper move per run (the rest wait for the next run)."""


class JobConsumerSettings(JobSettings, SealSettings):
    """The job consumer: also seals the envelope of what it isolates."""

    poison_queue_url: str = Field(pattern=r"^https?://")
