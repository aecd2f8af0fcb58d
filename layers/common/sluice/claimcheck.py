"""Claim check: large bodies live in S3, the message carries a pointer.

Wire formats understood by the consumer:

- AWS Extended Client (Java 2.x / Python ``amazon-sqs-extended-client``):
  body ``["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName": b, "s3Key": k}]``
  with Number attribute ``ExtendedPayloadSize``;
- its legacy form: class ``com.amazon.sqs.javamessaging.MessageS3Pointer``, attribute ``SQSLargePayloadSize``;
- the simple form ``{"__type": "CLAIM_CHECK", "s3_bucket": b, "s3_key": k}``.

The producer helper :func:`send` writes the first (most widely understood) format. Pointers are a
security boundary: a bucket outside the allowlist or a key outside the claim-check prefix is a
:class:`~sluice.errors.PermanentError`. Objects are never deleted here: the bucket's lifecycle rule
expires them, so a message re-driven days later still finds its payload.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from sluice.errors import PermanentError, TransientError
from sluice.groups import check_group_id, group_param
from sluice.limits import MAX_ATTRIBUTES, MAX_MESSAGE_BYTES
from sluice.sqs import message_bytes

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient

    from sluice.envelope import SendAttributes

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_THRESHOLD",
    "EXTENDED_POINTER_CLASS",
    "EXTENDED_SIZE_ATTRIBUTE",
    "LEGACY_POINTER_CLASS",
    "SIMPLE_TYPE",
    "Pointer",
    "authorize",
    "fetch",
    "lazy_offloader",
    "offloader",
    "parse_pointer",
    "rehearsal",
    "send",
]

EXTENDED_POINTER_CLASS = "software.amazon.payloadoffloading.PayloadS3Pointer"
LEGACY_POINTER_CLASS = "com.amazon.sqs.javamessaging.MessageS3Pointer"
EXTENDED_SIZE_ATTRIBUTE = "ExtendedPayloadSize"
SIMPLE_TYPE = "CLAIM_CHECK"
DEFAULT_THRESHOLD = 256 * 1024
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
"""Largest claim-check object the consumer reads (``ClaimCheckMaxBytes``). Reading one costs about
8 times its size at once (bytes, text, parsed JSON): 32 MiB keeps that within the 256 MB consumer."""


@dataclass(frozen=True, slots=True)
class Pointer:
    bucket: str
    key: str
    format: str  # "extended" | "legacy" | "simple"


def parse_pointer(body: str) -> Pointer | None:
    """The pointer a body carries, or None for an ordinary body. Cheap for ordinary bodies."""
    head = body.lstrip()[:80]
    if head.startswith("["):
        if EXTENDED_POINTER_CLASS not in head and LEGACY_POINTER_CLASS not in head:
            return None
        try:
            cls, ref = json.loads(body)
            bucket, key = ref["s3BucketName"], ref["s3Key"]
        except (ValueError, TypeError, KeyError) as exc:
            raise PermanentError(f"malformed S3 pointer body: {exc}") from None
        fmt = "extended" if cls == EXTENDED_POINTER_CLASS else "legacy"
        return _checked(bucket, key, fmt)
    if head.startswith("{") and SIMPLE_TYPE in body[:4096]:
        try:
            doc = json.loads(body)
        except ValueError:
            return None  # not JSON at all: the consumer's JSON decoding reports it
        if not isinstance(doc, dict) or doc.get("__type") != SIMPLE_TYPE:
            return None
        try:
            return _checked(doc["s3_bucket"], doc["s3_key"], "simple")
        except KeyError as exc:
            raise PermanentError(f"claim check pointer lacks {exc}") from None
    return None


def _checked(bucket: Any, key: Any, fmt: str) -> Pointer:
    if not isinstance(bucket, str) or not isinstance(key, str) or not bucket or not key:
        raise PermanentError(f"claim check pointer ({fmt}) needs non-empty string bucket and key")
    return Pointer(bucket=bucket, key=key, format=fmt)


def authorize(pointer: Pointer, *, buckets: tuple[str, ...], prefix: str) -> None:
    """Reject pointers outside the allowlist: a message must not make us read arbitrary objects."""
    if pointer.bucket not in buckets:
        raise PermanentError(f"claim check bucket {pointer.bucket!r} is not in the allowlist")
    normalized = pointer.key.split("/")
    if ".." in normalized or not pointer.key.startswith(prefix):
        raise PermanentError(f"claim check key {pointer.key!r} is outside the prefix {prefix!r}")


def fetch(s3: S3Client, pointer: Pointer, *, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """Download the payload. ``NoSuchKey`` is transient (read-after-write race, replication lag).

    An object larger than ``max_bytes`` is a :class:`~sluice.errors.PermanentError` and is not read:
    its size comes from the GetObject response before the body is read, and the read itself stops
    one byte past the cap whatever the response claimed.
    """
    try:
        obj = s3.get_object(Bucket=pointer.bucket, Key=pointer.key)
        body = obj["Body"]
        try:
            size = obj.get("ContentLength")
            if size is not None and int(size) > max_bytes:
                raise _too_large(pointer, f"{int(size):,} bytes", max_bytes)
            data = body.read(max_bytes + 1)
            if len(data) > max_bytes:
                raise _too_large(pointer, f"more than {max_bytes:,} bytes", max_bytes)
        finally:
            body.close()
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in {"NoSuchKey", "404"}:
            raise TransientError(
                f"claim check object s3://{pointer.bucket}/{pointer.key} not found yet"
            ) from exc
        if code in {"NoSuchBucket", "InvalidBucketName"}:
            raise PermanentError(f"claim check bucket {pointer.bucket!r} does not exist") from exc
        raise TransientError(f"claim check read failed ({code or 'error'})") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PermanentError("claim check payload is not UTF-8 text") from None


def _too_large(pointer: Pointer, size: str, max_bytes: int) -> PermanentError:
    return PermanentError(
        f"claim check object s3://{pointer.bucket}/{pointer.key} is {size}, over the "
        f"{max_bytes:,}-byte cap (ClaimCheckMaxBytes); not read"
    )


def offloader(s3: S3Client, *, bucket: str, prefix: str) -> Callable[[str], tuple[str, SendAttributes]]:
    """A function that stores a body under ``prefix`` in ``bucket`` and returns the pointer body (AWS
    Extended Client format) and the ``ExtendedPayloadSize`` attribute it travels with."""

    def offload(body: str) -> tuple[str, SendAttributes]:
        payload = body.encode("utf-8")
        key = f"{prefix}{uuid.uuid4()}"
        s3.put_object(Bucket=bucket, Key=key, Body=payload, ContentType="application/octet-stream")
        return _pointer(bucket, key, len(payload))

    return offload


def _pointer(bucket: str, key: str, size: int) -> tuple[str, SendAttributes]:
    pointer = json.dumps(
        [EXTENDED_POINTER_CLASS, {"s3BucketName": bucket, "s3Key": key}], separators=(",", ":")
    )
    return pointer, {EXTENDED_SIZE_ATTRIBUTE: {"DataType": "Number", "StringValue": str(size)}}


def _no_bucket() -> Exception:
    from sluice.fit import UnfittableError  # noqa: PLC0415 - fit imports nothing of this module

    return UnfittableError("the message is too large with its envelope and no claim-check bucket is set")


def lazy_offloader(
    s3: Callable[[], S3Client], *, buckets: tuple[str, ...], prefix: str
) -> Callable[[str], tuple[str, SendAttributes]]:
    """:func:`offloader` on the first of ``buckets``, its S3 client built on first use (most messages
    never need it); with no bucket, an offload raises :class:`~sluice.fit.UnfittableError`."""

    def offload(body: str) -> tuple[str, SendAttributes]:
        if not buckets:
            raise _no_bucket()
        return offloader(s3(), bucket=buckets[0], prefix=prefix)(body)

    return offload


def rehearsal(*, buckets: tuple[str, ...], prefix: str) -> Callable[[str], tuple[str, SendAttributes]]:
    """What :func:`lazy_offloader` would return, byte for byte, with nothing stored: for checking that
    a message sent later (a parked delay request) will fit once offloaded, without leaving an object
    whose lifecycle could expire before that send."""

    def offload(body: str) -> tuple[str, SendAttributes]:
        if not buckets:
            raise _no_bucket()
        return _pointer(buckets[0], f"{prefix}{uuid.uuid4()}", len(body.encode("utf-8")))

    return offload


def send(
    sqs: SQSClient,
    s3: S3Client,
    *,
    queue_url: str,
    body: str,
    bucket: str,
    prefix: str = "claim-check/",
    threshold: int = DEFAULT_THRESHOLD,
    attributes: SendAttributes | None = None,
    delay_seconds: int = 0,
    group_id: str | None = None,
) -> str:
    """Send ``body``; when body + attributes exceed ``threshold`` bytes, offload the body to S3 first.

    ``group_id`` is sent as the message's ``MessageGroupId`` (its tenant on a fair queue, whether the
    body is offloaded or not); one SQS would refuse is a :class:`~sluice.groups.MalformedGroupId`
    (a ``ValueError``), raised before anything is stored or sent.

    Returns the SQS message id. The pointer uses the AWS Extended Client format so Java and Python
    extended clients can read sluice's messages and vice versa.
    """
    group = check_group_id(group_id)
    attrs: SendAttributes = dict(attributes or {})
    if message_bytes(body, attrs) > min(threshold, MAX_MESSAGE_BYTES):
        if len(attrs) >= MAX_ATTRIBUTES:
            raise ValueError("a claim-check message needs one free attribute slot for ExtendedPayloadSize")
        body, pointer_attributes = offloader(s3, bucket=bucket, prefix=prefix)(body)
        attrs.update(pointer_attributes)
    kwargs: dict[str, Any] = {"QueueUrl": queue_url, "MessageBody": body}
    if attrs:
        kwargs["MessageAttributes"] = attrs
    if delay_seconds:
        kwargs["DelaySeconds"] = delay_seconds
    kwargs.update(group_param(group))
    return sqs.send_message(**kwargs)["MessageId"]
