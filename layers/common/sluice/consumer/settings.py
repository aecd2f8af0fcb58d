"""Settings of the partial-batch consumer (``SLUICE_*`` variables; see docs/configuration.md)."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from sluice.claimcheck import DEFAULT_MAX_BYTES as DEFAULT_CLAIM_CHECK_MAX_BYTES
from sluice.limits import MAX_VISIBILITY_SECONDS
from sluice.sealing import SealSettings
from sluice.settings import ClaimCheckSettings, Seconds
from sluice.workload_environment import parse as parse_workload_environment

__all__ = ["ConsumerSettings", "KeyMissing"]

KeyMissing = Literal["poison", "message-identity"]
"""What the consumer does with a body in which ``SLUICE_IDEMPOTENCY_KEY_JMESPATH`` finds nothing."""


class ConsumerSettings(SealSettings, ClaimCheckSettings):
    """Settings of the partial-batch consumer (``SLUICE_*`` variables; see docs/configuration.md)."""

    idempotency_table: str = Field(min_length=3)
    poison_queue_url: str = Field(pattern=r"^https?://")
    claim_check_max_bytes: int = Field(default=DEFAULT_CLAIM_CHECK_MAX_BYTES, ge=1024, le=1024**3)
    """Claim-check objects larger than this are isolated unread (see docs/claim-check.md)."""
    max_receive_count: int = Field(default=5, ge=1, le=1000)
    dead_letter_queue_url: str = Field(default="", pattern=r"^(https?://.+)?$")
    """Where a record failing on its last receive is sent with its error ('' = leave it to SQS)."""
    source_queue_url: str = Field(default="", pattern=r"^(https?://.+|arn:[^:]+:sqs:.+)?$")
    """The queue the consumer is triggered by, its URL or ARN: checked once at cold start (its visibility
    timeout, its redrive policy, its DLQ; :mod:`sluice.queuecheck`). '' = not checked (tests, events)."""
    delay_queue_url: str = Field(default="", pattern=r"^(https?://.+)?$")
    """The long-delay pipeline's queue, for ``record.later`` ('' = the processor cannot ask for delays)."""
    backoff_base_seconds: float = Field(default=2.0, gt=0, le=MAX_VISIBILITY_SECONDS)
    backoff_cap_seconds: float = Field(default=300.0, gt=0, le=MAX_VISIBILITY_SECONDS)
    backoff_floor_seconds: float = Field(default=1.0, ge=0, le=MAX_VISIBILITY_SECONDS)
    visibility_timeout_seconds: Seconds = 180
    batch_window_seconds: Seconds = 0
    heartbeat_fraction: float = Field(default=0.5, gt=0, lt=1)
    concurrency: int = Field(default=1, ge=1, le=64)
    fifo_skip_group_on_error: bool = False
    """On a FIFO queue, a failure holds back only its own group's later records of the batch; the other
    groups' go on (False: the first failure holds back every later record, Lambda's default rule)."""
    idempotency_key_jmespath: str = ""
    idempotency_key_missing: KeyMissing = "poison"
    """A body where the key path yields nothing is logged and counted, then isolated to the poison queue
    with the reason ('poison'), or processed under its message identity ('message-identity')."""
    idempotency_ttl_seconds: int = Field(default=14 * 24 * 3600, ge=60)
    workload_environment: str = ""
    """The workload's extra variables, ``NAME=value`` a line (workloads.yaml's ``Environment``): checked
    here, put in the environment by ``Consumer.from_env`` (:mod:`sluice.workload_environment`)."""

    @field_validator("idempotency_key_jmespath")
    @classmethod
    def _compiles(cls, value: str) -> str:
        if value:
            import jmespath  # noqa: PLC0415 - only when an expression is configured
            from jmespath.exceptions import JMESPathError  # noqa: PLC0415

            try:
                jmespath.compile(value)
            except JMESPathError as exc:
                raise ValueError(f"not a valid JMESPath expression: {exc}") from None
        return value

    @field_validator("workload_environment")
    @classmethod
    def _workload_variables(cls, value: str) -> str:
        parse_workload_environment(value)  # a reserved or malformed entry fails the cold start, named
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.backoff_floor_seconds > self.backoff_cap_seconds:
            raise ValueError(
                f"SLUICE_BACKOFF_FLOOR_SECONDS ({self.backoff_floor_seconds}) exceeds "
                f"SLUICE_BACKOFF_CAP_SECONDS ({self.backoff_cap_seconds})"
            )
        if self.source_queue_url.endswith(".fifo") and self.concurrency > 1:
            raise ValueError(
                f"SLUICE_CONCURRENCY is {self.concurrency}, but the source queue is FIFO: its records are "
                "processed in order, one at a time (set InBatchConcurrency to 1 for this workload)"
            )
        return self
