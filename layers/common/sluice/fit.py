"""Make a message sluice re-sends acceptable to SQS, losing nothing.

Every path that writes a message again (poison isolation, dead-lettering with the error, redrive,
delay direct send, rehydration) adds or grows sluice's envelope, so a message that SQS took from its
producer may no longer fit: SQS counts the body plus every attribute's name, type and value against
1 MiB. :func:`fit` makes it fit, in this order, never by dropping the user's data:

1. envelope fields sluice does not know (a newer sluice's, or a producer's) are capped at
   :data:`MAX_UNKNOWN_FIELD_BYTES` each, a marker recording what was cut;
2. for the poison queue (``quarantine=True``), user attributes SQS would refuse on re-send are moved,
   value and reason, into the envelope's ``refused_attributes``, so the message can be isolated;
3. when still too large, the last error's text is shortened;
4. when still too large, the body is offloaded through the claim check (``offload``) and the message
   carries the pointer, as the AWS Extended Client writes it.

What cannot be made to fit raises :class:`UnfittableError` with the reason; the caller keeps the message
where it is (retry, or the dead-letter queue), so nothing is lost silently.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sluice.envelope import ATTRIBUTE, Envelope, Seal, SendAttributes, merge
from sluice.errors import SluiceError
from sluice.limits import MAX_MESSAGE_BYTES
from sluice.sqs import check_attribute, check_message, message_bytes

__all__ = ["MAX_UNKNOWN_FIELD_BYTES", "Fitted", "Offload", "UnfittableError", "fit"]

MAX_UNKNOWN_FIELD_BYTES = 1024
SHORT_ERROR_MESSAGE = 120

Offload = Callable[[str], tuple[str, SendAttributes]]
"""body → (pointer body, attributes the pointer needs): :func:`sluice.claimcheck.offloader`."""


class UnfittableError(SluiceError):
    """The message cannot be made acceptable to SQS; the message names why."""


@dataclass(frozen=True, slots=True)
class Fitted:
    body: str
    attributes: SendAttributes
    """User attributes plus the envelope, in the SendMessage shape."""
    changes: tuple[str, ...] = ()
    """What was done to make it fit (for the log line)."""


def fit(
    body: str,
    user: SendAttributes,
    envelope: Envelope,
    *,
    seal: Seal | None,
    quarantine: bool = False,
    offload: Offload | None = None,
    max_bytes: int = MAX_MESSAGE_BYTES,
) -> Fitted:
    """``body`` with ``user`` attributes and ``envelope`` (sealed with ``seal`` for the body it ends up
    with), made acceptable to SQS (see the module)."""
    changes: list[str] = []
    envelope, capped = cap_unknown_fields(envelope)
    changes += [f"unknown envelope field {name!r} capped" for name in capped]
    user = {name: value for name, value in user.items() if name != ATTRIBUTE}
    if quarantine:
        user, envelope, moved = _quarantine(user, envelope)
        changes += [f"attribute {name!r} moved into the envelope ({why})" for name, why in moved]
    attributes = merge(user, envelope, body=body, seal=seal)
    if message_bytes(body, attributes) > max_bytes and envelope.last_error is not None:
        error = envelope.last_error
        if len(error.message) > SHORT_ERROR_MESSAGE:
            short = error.model_copy(update={"message": error.message[: SHORT_ERROR_MESSAGE - 1] + "…"})
            envelope = envelope.model_copy(update={"last_error": short})
            attributes = merge(user, envelope, body=body, seal=seal)
            changes.append("last error text shortened")
    if message_bytes(body, attributes) > max_bytes and offload is not None:
        body, pointer_attributes = offload(body)
        user = {**user, **pointer_attributes}
        attributes = merge(user, envelope, body=body, seal=seal)
        changes.append("body offloaded to the claim check")
    refusal = check_message(body, attributes, max_bytes=max_bytes)
    if refusal is not None:
        raise UnfittableError(f"SQS would refuse the message even after fitting it: {refusal}")
    return Fitted(body, attributes, tuple(changes))


def cap_unknown_fields(envelope: Envelope) -> tuple[Envelope, list[str]]:
    """The envelope with each field sluice does not know cut to a marker when its JSON exceeds
    :data:`MAX_UNKNOWN_FIELD_BYTES`; returns the names cut."""
    extra = envelope.model_extra or {}
    capped: dict[str, Any] = {}
    for name, value in extra.items():
        size = len(json.dumps(value, default=str).encode())
        if size > MAX_UNKNOWN_FIELD_BYTES:
            capped[name] = {"capped": True, "bytes": size}
    if not capped:
        return envelope, []
    data = envelope.model_dump(exclude_none=True)
    data.update(capped)
    return Envelope.model_validate(data), sorted(capped)


def _quarantine(
    user: SendAttributes, envelope: Envelope
) -> tuple[SendAttributes, Envelope, list[tuple[str, str]]]:
    kept: SendAttributes = {}
    refused: dict[str, Any] = dict(envelope.refused_attributes or {})
    moved: list[tuple[str, str]] = []
    for name, value in user.items():
        refusal = check_attribute(name, value)
        if refusal is None:
            kept[name] = value
            continue
        refused[str(name)] = {"reason": refusal.message, "value": _as_json(value)}
        moved.append((str(name), refusal.message))
    if not moved:
        return user, envelope, []
    return kept, envelope.model_copy(update={"refused_attributes": refused}), moved


def _as_json(value: Any) -> Any:
    """An attribute value as JSON (binary as base64), whatever shape a producer gave it."""
    if isinstance(value, bytes | bytearray):
        return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {str(k): _as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_as_json(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)
