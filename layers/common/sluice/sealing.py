"""The stack's envelope key: read once per cold start from Secrets Manager (Powertools parameters).

template.yaml creates the secret (``EnvelopeKey``, a generated 64-character string) and hands its ARN
to every function as ``SLUICE_ENVELOPE_KEY_SECRET``. The current version signs; the previous one
(``AWSPREVIOUS``, present after a rotation) still verifies, so messages in flight during a rotation
keep their bookkeeping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from sluice.envelope import MIN_KEY_BYTES, Seal
from sluice.errors import ConfigurationError
from sluice.settings import EnvSettings

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient

__all__ = ["SealSettings", "load_seal"]


class SealSettings(EnvSettings):
    """Settings of every function that reads or writes envelopes."""

    envelope_key_secret: str = Field(min_length=1)
    """ARN (or name) of the Secrets Manager secret holding the envelope key."""


def load_seal(secret_id: str, *, client: SecretsManagerClient | Any | None = None) -> Seal:
    """The seal of ``secret_id``'s current key (and previous key, when there is one).

    Raises :class:`~sluice.errors.ConfigurationError` when the secret cannot be read or its key is
    shorter than :data:`~sluice.envelope.MIN_KEY_BYTES` bytes: a function that cannot seal must not
    start, or every envelope it writes would lose its bookkeeping at the next hop.
    """
    from aws_lambda_powertools.utilities.parameters import SecretsProvider  # noqa: PLC0415
    from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError  # noqa: PLC0415

    provider = SecretsProvider(boto3_client=client) if client is not None else SecretsProvider()
    try:
        current = provider.get(secret_id, max_age=0)
    except GetParameterError as exc:
        raise ConfigurationError(f"SLUICE_ENVELOPE_KEY_SECRET: cannot read {secret_id}: {exc}") from None
    keys = [_key_bytes(current, secret_id)]
    try:
        previous = provider.get(secret_id, max_age=0, VersionStage="AWSPREVIOUS")
    except GetParameterError:
        previous = None  # never rotated
    if previous is not None and previous != current:
        keys.append(_key_bytes(previous, secret_id))
    return Seal(tuple(keys))


def _key_bytes(value: object, secret_id: str) -> bytes:
    key = value.encode() if isinstance(value, str) else bytes(value) if isinstance(value, bytes) else b""
    if len(key) < MIN_KEY_BYTES:
        raise ConfigurationError(
            f"SLUICE_ENVELOPE_KEY_SECRET: the key in {secret_id} is shorter than {MIN_KEY_BYTES} bytes"
        )
    return key
