"""The base of every capability's settings: read from the environment at cold start, validated.

A bad or missing setting raises :class:`~sluice.errors.ConfigurationError` whose message names the
environment variable, so a misconfigured function fails its cold start loudly instead of
mis-processing messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sluice.errors import ConfigurationError
from sluice.limits import MAX_VISIBILITY_SECONDS

__all__ = ["ENV_PREFIX", "ClaimCheckSettings", "EnvSettings", "Seconds", "split_csv"]

ENV_PREFIX = "SLUICE_"

_Settings = TypeVar("_Settings", bound="EnvSettings")


class EnvSettings(BaseModel):
    """Base: fields are read from ``SLUICE_<FIELD_NAME_UPPER>`` environment variables."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    @classmethod
    def from_env(cls: type[_Settings], environ: Mapping[str, str]) -> _Settings:
        values = {
            name: environ[ENV_PREFIX + name.upper()]
            for name in cls.model_fields
            if ENV_PREFIX + name.upper() in environ
        }
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                field = str(err["loc"][0]) if err["loc"] else ""
                var = ENV_PREFIX + field.upper() if field else "(settings)"
                problems.append(f"{var}: {err['msg']}")
            raise ConfigurationError(f"invalid {cls.__name__}: " + "; ".join(problems)) from None


def split_csv(value: object) -> object:
    """A comma-separated string as a tuple of its non-empty, stripped parts (other values as they are)."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


Seconds = Annotated[int, Field(ge=0, le=MAX_VISIBILITY_SECONDS)]


class ClaimCheckSettings(EnvSettings):
    """The claim-check bucket(s) and prefix: where the consumer reads pointers, and where every function
    that re-sends a message offloads a body that no longer fits beside its envelope (the first bucket)."""

    claim_check_buckets: tuple[str, ...] = ()
    claim_check_prefix: str = Field(default="", pattern=r"^($|[^/])")
    """Keys pointers must start with (never '/'); '' (any key in the allowed buckets) reads what the
    Extended Clients write."""
    _claim_check_csv = field_validator("claim_check_buckets", mode="before")(split_csv)

    def offloader(self, s3: Callable[[], Any]) -> Callable[[str], tuple[str, dict[str, dict[str, Any]]]]:
        """Stores a body in the first claim-check bucket under the prefix; ``s3`` builds the client on
        first use (:func:`sluice.claimcheck.lazy_offloader`)."""
        from sluice.claimcheck import lazy_offloader  # noqa: PLC0415 - claimcheck imports boto3's errors

        return lazy_offloader(s3, buckets=self.claim_check_buckets, prefix=self.claim_check_prefix)

    def rehearsal(self) -> Callable[[str], tuple[str, dict[str, dict[str, Any]]]]:
        """What :meth:`offloader` would return, nothing stored (:func:`sluice.claimcheck.rehearsal`)."""
        from sluice.claimcheck import rehearsal  # noqa: PLC0415 - claimcheck imports boto3's errors

        return rehearsal(buckets=self.claim_check_buckets, prefix=self.claim_check_prefix)
