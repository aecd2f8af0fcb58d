"""Settings of the batch-delay and rehydrator functions (``SLUICE_*``; see docs/delays.md)."""

from __future__ import annotations

from typing import Self

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

    _csv = field_validator("delay_targets", mode="before")(split_csv)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.delay_bucket_seconds * 2 > self.direct_send_threshold_seconds:
            raise ValueError(
                "SLUICE_DELAY_BUCKET_SECONDS must be at most half of SLUICE_DIRECT_SEND_THRESHOLD_SECONDS "
                f"({self.delay_bucket_seconds} > {self.direct_send_threshold_seconds}/2): "
                "a bucket must never open while it is still being written"
            )
        if not self.delay_prefix.endswith("/") or self.delay_prefix.startswith("/"):
            raise ValueError("SLUICE_DELAY_PREFIX must end with '/' and not start with '/'")
        return self
