"""The sluice envelope: ALL of sluice's bookkeeping in ONE message attribute of compact JSON.

A user's own message attributes (SQS allows 10 per message) therefore survive every hop: sluice
only ever adds, reads or replaces the single attribute named :data:`ATTRIBUTE`. Field names are
documented in docs/envelope.md. The envelope is versioned (``v``). Unknown fields of version 1 are
kept as they are, so an older sluice forwards what a newer one added; an envelope of another version
is treated as absent (with a warning), never as a crash.

Any principal allowed to send to a queue can write this attribute, so the bookkeeping only sluice
writes (:data:`SEALED_FIELDS`: identity, source, attempts, failure and redrive times, last error) is
sealed: ``sig`` is an HMAC-SHA256, with the stack's key (:class:`Seal`), over those fields and the
SHA-256 of the message body they travel with. A sealed field whose seal is missing or wrong is
treated as absent (the reason is returned for a warning and a metric), so a forged attempt count, a
forged redrive time or a borrowed identity cannot steer sluice. Fields producers may set (``deliver_at``,
``target``, ``trace``, ``group``) are not sealed; they are validated where they are used.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sluice.limits import MAX_ATTRIBUTES

__all__ = [
    "ATTRIBUTE",
    "MAX_ERROR_MESSAGE",
    "MIN_KEY_BYTES",
    "SEALED_FIELDS",
    "SEAL_SCHEME",
    "Envelope",
    "ErrorInfo",
    "Seal",
    "SendAttributes",
    "decode",
    "from_event_attributes",
    "merge",
    "split",
    "string_value",
    "utcnow",
]

ATTRIBUTE = "sluice"
MAX_ERROR_MESSAGE = 512
SEALED_FIELDS = ("origin_id", "source", "attempts", "first_failure", "last_error", "redriven_at")
"""The fields only sluice writes: covered by ``sig``."""
SEAL_SCHEME = "hs256"
MIN_KEY_BYTES = 32

SendAttributes = dict[str, dict[str, Any]]
"""Message attributes in the SendMessage shape: ``{"name": {"DataType": ..., "StringValue": ...}}``."""


def utcnow() -> datetime:
    return datetime.now(UTC)


class ErrorInfo(BaseModel):
    """The last failure of a message: what, why, when, on which receive."""

    model_config = ConfigDict(extra="allow", frozen=True)

    type: str
    message: str = Field(max_length=MAX_ERROR_MESSAGE)
    at: datetime
    receives: int | None = None

    @classmethod
    def of(cls, type_: str, message: str, *, at: datetime, receives: int | None = None) -> ErrorInfo:
        """An error whose message is cut to :data:`MAX_ERROR_MESSAGE` characters (marked with …)."""
        if len(message) > MAX_ERROR_MESSAGE:
            message = message[: MAX_ERROR_MESSAGE - 1] + "…"
        return cls(type=type_, message=message, at=at, receives=receives)

    @classmethod
    def from_exception(
        cls, exc: BaseException, *, receives: int | None = None, at: datetime | None = None
    ) -> ErrorInfo:
        name = exc.__class__.__name__
        return cls.of(name, str(exc) or name, at=at or utcnow(), receives=receives)


class Envelope(BaseModel):
    """Bookkeeping that travels with a message across every sluice hop."""

    model_config = ConfigDict(extra="allow", frozen=True)

    v: Literal[1] = 1
    origin_id: str | None = None
    """SQS message id of the first hop; set once, never changed (the message's identity)."""
    attempts: int = Field(default=0, ge=0)
    """Delivery cycles that have failed so far (a cycle = one trip through a queue to a consumer)."""
    first_failure: datetime | None = None
    last_error: ErrorInfo | None = None
    trace: str | None = None
    """X-Ray trace header of the first hop (``Root=...;Parent=...;Sampled=...``); every hop sends the
    message with it as its ``AWSTraceHeader`` (:mod:`sluice.tracing`)."""
    traceparent: str | None = None
    """W3C trace context of the message (the producer's ``traceparent`` attribute, else the X-Ray
    trace, else a new one); its trace id is every log line's ``correlation_id``."""
    deliver_at: datetime | None = None
    """When a delayed message is due (UTC); set by :func:`sluice.delay.send_delayed`."""
    target: str | None = None
    """Queue URL a delayed message is delivered to (must be on the delay allowlist)."""
    group: Any = None
    """The message's ``MessageGroupId`` (its tenant on a fair queue), for the hops that cannot carry the
    SQS attribute (a body parked in S3, a schedule's input). Untrusted: checked where it is read
    (:func:`sluice.groups.group_of`), so a malformed one never makes the rest of the envelope unreadable."""
    source: str | None = None
    """The queue a redrive or a replay takes the message back to, if allowlisted (else it is refused):
    on the first hop, the ARN of the queue it was first consumed from; a consumer that dead-letters or
    isolates it itself sets the queue it failed on; the redriver, the queue it re-drives it to."""
    redriven_at: datetime | None = None
    """When the message sluice last re-drove from a dead-letter queue was due on its source again
    (re-driven at + its backoff, UTC): a message back in the DLQ soon after is bouncing."""
    displaced: dict[str, dict[str, Any]] | None = None
    """User attributes that did not fit beside the envelope (SQS allows 10); restored on read."""
    refused_attributes: dict[str, Any] | None = None
    """User attributes SQS refused on re-send, kept with SQS's reason when the message was isolated
    (``{"name": {"reason": ..., "value": {...}}}``, binary values as ``{"base64": ...}``)."""
    sig: str | None = None
    """``hs256:<base64url HMAC>`` over :data:`SEALED_FIELDS` and the body's SHA-256 (see :class:`Seal`)."""

    def to_json(self) -> str:
        return self.model_dump_json(exclude_none=True, exclude_defaults=False)

    def recording(self, error: ErrorInfo, *, attempts: int | None = None, **changes: Any) -> Envelope:
        """The envelope with ``error`` as its last error (the first failure's time kept), its attempts
        set to ``attempts`` when given, and any other field ``changes``: the one way a failure is
        written down, on every path."""
        update: dict[str, Any] = {"last_error": error, "first_failure": self.first_failure or error.at}
        if attempts is not None:
            update["attempts"] = attempts
        return self.model_copy(update={**changes, **update})

    def failed(self, exc: BaseException, *, receives: int | None = None) -> Envelope:
        """The envelope after one more failed cycle caused by ``exc``."""
        return self.recording(ErrorInfo.from_exception(exc, receives=receives), attempts=self.attempts + 1)


def decode(raw: str | None) -> tuple[Envelope | None, str | None]:
    """Parse the attribute value; returns (envelope, problem). Corrupt or unknown → (None, reason)."""
    if raw is None:
        return None, None
    try:
        return Envelope.model_validate_json(raw), None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "envelope"
        return None, f"ignoring unreadable sluice envelope ({where}: {first['msg']})"


# --- attribute shapes --------------------------------------------------------------------------


def from_event_attributes(attributes: dict[str, Any] | None) -> SendAttributes:
    """Lambda SQS event ``messageAttributes`` (camelCase) → SendMessage shape, values untouched."""
    out: SendAttributes = {}
    for name, value in (attributes or {}).items():
        data_type = value.get("dataType") or value.get("DataType") or "String"
        if value.get("binaryValue") is not None or value.get("BinaryValue") is not None:
            binary = value.get("binaryValue", value.get("BinaryValue"))
            if isinstance(binary, str):  # the Lambda event carries binary values base64-encoded
                try:
                    binary = base64.b64decode(binary, validate=True)
                except binascii.Error:
                    binary = binary.encode()
            out[name] = {"DataType": data_type, "BinaryValue": binary}
        else:
            string = value.get("stringValue", value.get("StringValue"))
            out[name] = {"DataType": data_type, "StringValue": "" if string is None else str(string)}
    return out


def string_value(attributes: SendAttributes, name: str) -> str | None:
    value = attributes.get(name)
    if value is None:
        return None
    string = value.get("StringValue")
    return None if string is None else str(string)


def split(
    attributes: SendAttributes, *, body: str, seal: Seal | None
) -> tuple[SendAttributes, Envelope | None, str | None]:
    """Separate user attributes from the envelope; restore any displaced user attributes.

    With a ``seal``, sealed fields that fail its check are dropped and the problem says so (an
    envelope left with nothing is returned as None). ``seal=None`` reads without checking (tools
    that only display; never a sluice function).
    """
    user = {k: v for k, v in attributes.items() if k != ATTRIBUTE}
    raw = string_value(attributes, ATTRIBUTE)
    env, problem = decode(raw)
    if raw is None and ATTRIBUTE in attributes:
        problem = "ignoring the sluice attribute: it is not a String"
    if env is not None and seal is not None:
        env, problem = seal.open(env, body)
    elif env is not None:  # the seal is a wire format: an envelope in hand carries none (merge seals)
        env = env.model_copy(update={"sig": None})
    if env is not None and env.displaced:
        for name, value in env.displaced.items():
            restored = dict(value)
            if "BinaryValue" in restored and isinstance(restored["BinaryValue"], str):
                try:
                    restored["BinaryValue"] = base64.b64decode(restored["BinaryValue"], validate=True)
                except binascii.Error:
                    problem = f"displaced attribute {name!r} has an undecodable binary value; left out"
                    continue
            user.setdefault(name, restored)
    return user, env, problem


def merge(user: SendAttributes, env: Envelope, *, body: str, seal: Seal | None) -> SendAttributes:
    """User attributes plus the envelope (sealed for ``body`` with ``seal``), within SQS's 10-attribute
    limit. Without a seal the envelope travels unsealed: its sealed fields are ignored on arrival.

    When a message already carries 10 user attributes, the ones that do not fit (the last by name)
    travel inside the envelope's ``displaced`` field and are restored by :func:`split`, so nothing
    is lost.
    """
    names = sorted(name for name in user if name != ATTRIBUTE)  # never carry an old envelope along
    keep, spill = names[: MAX_ATTRIBUTES - 1], names[MAX_ATTRIBUTES - 1 :]
    out: SendAttributes = {name: user[name] for name in keep}
    if spill:
        displaced: dict[str, dict[str, Any]] = {}
        for name in spill:
            value = dict(user[name])
            if isinstance(value.get("BinaryValue"), bytes | bytearray):
                value["BinaryValue"] = base64.b64encode(value["BinaryValue"]).decode()
            displaced[name] = value
        env = env.model_copy(update={"displaced": displaced})
    elif env.displaced:
        env = env.model_copy(update={"displaced": None})
    env = seal.sign(env, body) if seal is not None else env.model_copy(update={"sig": None})
    out[ATTRIBUTE] = {"DataType": "String", "StringValue": env.to_json()}
    return out


# --- the seal ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seal:
    """HMAC keys of a stack: the first signs, every one verifies (the previous key, while a rotation
    drains the messages in flight)."""

    keys: tuple[bytes, ...]

    def __post_init__(self) -> None:
        if not self.keys or any(len(key) < MIN_KEY_BYTES for key in self.keys):
            raise ValueError(f"an envelope key must be at least {MIN_KEY_BYTES} bytes")

    def __repr__(self) -> str:  # never print key material
        return f"Seal(keys={len(self.keys)})"

    def sign(self, env: Envelope, body: str) -> Envelope:
        """``env`` with ``sig`` over its sealed fields and ``body`` (no sig when nothing is sealed)."""
        if not _sealed_part(env):
            return env.model_copy(update={"sig": None})
        return env.model_copy(update={"sig": _signature(self.keys[0], env, body)})

    def open(self, env: Envelope, body: str) -> tuple[Envelope | None, str | None]:
        """(envelope, problem): ``env`` when its seal holds (or nothing in it is sealed); otherwise
        without its sealed fields, and the reason. The envelope returned carries no ``sig``."""
        if not _sealed_part(env):
            return env.model_copy(update={"sig": None}), None
        given = (env.sig or "").encode("utf-8", errors="surrogatepass")  # any text a producer wrote
        if env.sig is not None and any(
            hmac.compare_digest(given, _signature(key, env, body).encode()) for key in self.keys
        ):
            return env.model_copy(update={"sig": None}), None
        why = "has no seal" if env.sig is None else "has a seal that does not match it and its body"
        fields = ", ".join(sorted(_sealed_part(env)))
        problem = f"ignoring sluice bookkeeping ({fields}): the envelope {why} (forged or altered)"
        data = env.model_dump(exclude_none=True, exclude=set(SEALED_FIELDS) | {"sig"})
        rest = Envelope.model_validate(data)
        return (rest if rest.model_dump(exclude_defaults=True) else None), problem


def _sealed_part(env: Envelope) -> dict[str, Any]:
    return env.model_dump(mode="json", include=set(SEALED_FIELDS), exclude_defaults=True)


def _signature(key: bytes, env: Envelope, body: str) -> str:
    # over the fields as they travel (to_json drops None, validation normalises types): what the
    # reader of the attribute sees is what was signed
    wire = Envelope.model_validate_json(env.to_json())
    fields = json.dumps(_sealed_part(wire), sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(body.encode("utf-8", errors="surrogatepass")).digest()
    mac = hmac.new(key, b"sluice-envelope-v1\n" + fields + b"\n" + digest, hashlib.sha256).digest()
    return f"{SEAL_SCHEME}:{base64.urlsafe_b64encode(mac).decode().rstrip('=')}"
