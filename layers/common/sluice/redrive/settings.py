"""Settings of the circuit breaker, the redriver and the redrive state machine's steps (``SLUICE_*``)."""

from __future__ import annotations

from typing import Self

from pydantic import Field, field_validator, model_validator

from sluice.limits import MAX_DELAY_SECONDS, MAX_LONG_DELAY_SECONDS
from sluice.redrive.breaker import DEFAULT_NAME, BreakerPolicy
from sluice.sealing import SealSettings
from sluice.settings import ClaimCheckSettings, EnvSettings, split_csv
from sluice.sqs import queue_identity

__all__ = ["FIFO_NOT_REDRIVEN", "BreakerSettings", "RedriveSettings"]

FIFO_NOT_REDRIVEN = (
    "a FIFO workload's dead-letter queue is not re-driven yet (a FIFO queue takes no DelaySeconds and needs "
    "a deduplication id): its messages stay in it, the DLQ alarms say so (docs/workloads.md)"
)
"""Why a redrive of a FIFO dead-letter queue leaves every message where it is (issue 27's next step)."""


class BreakerSettings(EnvSettings):
    """The circuit breaker's item and policy (``SLUICE_BREAKER_*``; see docs/redrive.md)."""

    breaker_table: str = Field(min_length=3)
    breaker_name: str = Field(default=DEFAULT_NAME, min_length=1, max_length=200)
    """The breaker's item in the table: one per workload (template.yaml names it after the workload)."""
    breaker_cooldown_seconds: int = Field(default=300, ge=1, le=86_400)
    breaker_bounce_percent: float = Field(default=50.0, ge=0, le=100)
    """Share of bouncing messages, in percent, above which the breaker opens."""
    breaker_min_sample: int = Field(default=10, ge=1, le=10_000)

    def policy(self) -> BreakerPolicy:
        return BreakerPolicy(
            cooldown_seconds=self.breaker_cooldown_seconds,
            bounce_threshold=self.breaker_bounce_percent / 100,
            min_sample=self.breaker_min_sample,
        )


class RedriveSettings(BreakerSettings, SealSettings, ClaimCheckSettings):
    """Settings of the redriver and the redrive state machine's Plan step (``SLUICE_*``)."""

    dead_letter_queue_url: str = Field(pattern=r"^https?://")
    poison_queue_url: str = Field(pattern=r"^https?://")
    source_queue_arn: str = ""
    """The queue whose dead-letter queue this is (the stack's work queue): always on the allowlist.
    Never a destination by default: a message goes back only to the queue it came from
    (:mod:`sluice.redrive.plan`)."""
    redrive_sources: tuple[str, ...] = ()
    """Allowlist of queues (ARNs or URLs) messages may be re-driven or replayed to, besides
    ``source_queue_arn``."""
    delay_queue_url: str = ""
    """The long-delay pipeline's queue: backoffs beyond the direct-send threshold go through it."""
    delay_targets: tuple[str, ...] = ()
    """The queues the delay pipeline delivers to (its own ``SLUICE_DELAY_TARGETS``). A backoff beyond the
    direct-send threshold to a queue it would refuse (an existing queue not in ExtraDelayTargetArns) is
    capped at the threshold and sent directly, instead of being isolated by the pipeline. Empty: not
    known, every queue is taken to be one it delivers to."""
    redrive_max_attempts: int = Field(default=5, ge=1, le=100)
    redrive_base_seconds: float = Field(default=60.0, gt=0, le=MAX_LONG_DELAY_SECONDS)
    redrive_cap_seconds: float = Field(default=3600.0, gt=0, le=MAX_LONG_DELAY_SECONDS)
    redrive_floor_seconds: float = Field(default=1.0, ge=0, le=MAX_LONG_DELAY_SECONDS)
    direct_send_threshold_seconds: int = Field(default=MAX_DELAY_SECONDS, ge=1, le=MAX_DELAY_SECONDS)
    redrive_max_per_second: float = Field(default=50.0, gt=0, le=3000)
    receive_wait_seconds: int = Field(default=2, ge=0, le=20)

    _sources = field_validator("redrive_sources", "delay_targets", mode="before")(split_csv)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.redrive_floor_seconds > self.redrive_cap_seconds:
            raise ValueError(
                f"SLUICE_REDRIVE_FLOOR_SECONDS ({self.redrive_floor_seconds}) exceeds "
                f"SLUICE_REDRIVE_CAP_SECONDS ({self.redrive_cap_seconds})"
            )
        if self.source_queue_arn and queue_identity(self.source_queue_arn) is None:
            raise ValueError(f"SLUICE_SOURCE_QUEUE_ARN is not a queue ARN or URL: {self.source_queue_arn!r}")
        for entry in self.redrive_sources:
            if queue_identity(entry) is None:
                raise ValueError(f"SLUICE_REDRIVE_SOURCES entry is not a queue ARN or URL: {entry!r}")
        return self

    @property
    def allowlist(self) -> tuple[str, ...]:
        return tuple(
            dict.fromkeys(
                (self.source_queue_arn, *self.redrive_sources)
                if self.source_queue_arn
                else self.redrive_sources
            )
        )
