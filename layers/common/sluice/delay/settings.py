"""Settings of the batch-delay and rehydrator functions (``SLUICE_*``; see docs/delays.md)."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from sluice.limits import MAX_DELAY_SECONDS
from sluice.sealing import SealSettings
from sluice.settings import ClaimCheckSettings, split_csv

__all__ = ["DelaySettings"]


class DelaySettings(SealSettings, ClaimCheckSettings):
    """Settings of the batch-delay and rehydrator functions (``SLUICE_*``; see docs/delays.md)."""

    delay_bucket: str = Field(min_length=3)
    delay_prefix: str = "delayed/"
    delay_state_machine_arn: str = ""
    delay_targets: tuple[str, ...] = ()
    direct_send_threshold_seconds: int = Field(default=MAX_DELAY_SECONDS, ge=1, le=MAX_DELAY_SECONDS)
    delay_bucket_seconds: int = Field(default=60, ge=1, le=MAX_DELAY_SECONDS // 2)
    past_grace_seconds: int = Field(default=300, ge=0, le=86_400)
    poison_queue_url: str = Field(pattern=r"^https?://")
    # The orchestrator of parked messages (docs/delays.md): "state-machine" (S3 + one execution per
    # bucket) or "scheduler" (messages inline in EventBridge Scheduler one-time schedules; S3 + the
    # state machine only for what does not fit a schedule's input). Set by the DelayOrchestrator parameter.
    delay_orchestrator: Literal["state-machine", "scheduler"] = "state-machine"
    delay_schedule_group: str = Field(default="", pattern=r"^[0-9a-zA-Z._-]{0,64}$")
    delay_scheduler_role_arn: str = ""
    delay_rehydrator_arn: str = ""
    delay_schedule_dlq_arn: str = ""

    _csv = field_validator("delay_targets", mode="before")(split_csv)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.delay_bucket_seconds * 2 > self.direct_send_threshold_seconds:
            raise ValueError(
                "SLUICE_DELAY_BUCKET_SECONDS must be at most half of SLUICE_DIRECT_SEND_THRESHOLD_SECONDS "
                f"({self.delay_bucket_seconds} > {self.direct_send_threshold_seconds}/2): "
                "a bucket must never open while it is still being written"
            )
        if self.delay_orchestrator == "scheduler":
            if not self.delay_schedule_group:
                raise ValueError(
                    "SLUICE_DELAY_SCHEDULE_GROUP is required when SLUICE_DELAY_ORCHESTRATOR is scheduler"
                )
            for name, value, service in (
                ("SLUICE_DELAY_SCHEDULER_ROLE_ARN", self.delay_scheduler_role_arn, ":iam::"),
                ("SLUICE_DELAY_REHYDRATOR_ARN", self.delay_rehydrator_arn, ":lambda:"),
                ("SLUICE_DELAY_SCHEDULE_DLQ_ARN", self.delay_schedule_dlq_arn, ":sqs:"),
            ):
                if not value.startswith("arn:") or service not in value:
                    raise ValueError(
                        f"{name} must be an ARN ({service.strip(':')}) when SLUICE_DELAY_ORCHESTRATOR is "
                        f"scheduler; got {value!r}"
                    )
        if not self.delay_prefix.endswith("/") or self.delay_prefix.startswith("/"):
            raise ValueError("SLUICE_DELAY_PREFIX must end with '/' and not start with '/'")
        return self
