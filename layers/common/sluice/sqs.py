"""Small SQS helpers shared by every function."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sluice.envelope import SendAttributes


def queue_identity(reference: str) -> tuple[str | None, str, str] | None:
    """(region or None, account, queue name) of a queue URL or ARN; None when it is neither.

    The region of a URL is read from an ``sqs.<region>.`` host; other hosts (VPC endpoints, local
    emulators) give None, which matches any region.
    """
    if reference.startswith("arn:"):
        parts = reference.split(":")
        if len(parts) == 6 and parts[2] == "sqs" and parts[4] and parts[5]:
            return parts[3] or None, parts[4], parts[5]
        return None
    if reference.startswith(("https://", "http://")):
        rest = reference.split("://", 1)[1].split("?", 1)[0].rstrip("/")
        host, _, path = rest.partition("/")
        segments = path.split("/")
        if len(segments) >= 2 and segments[-2] and segments[-1]:
            labels = host.split(".")
            region = labels[1] if len(labels) > 2 and labels[0] == "sqs" else None
            return region, segments[-2], segments[-1]
    return None


def same_queue(a: tuple[str | None, str, str], b: tuple[str | None, str, str]) -> bool:
    """Same account and name, and the same region where both tell it."""
    return a[1:] == b[1:] and (a[0] is None or b[0] is None or a[0] == b[0])


def queue_url_from_arn(arn: str, *, endpoint: str | None = None) -> str:
    """``arn:aws:sqs:eu-west-1:123456789012:name`` → ``https://sqs.eu-west-1.amazonaws.com/123456789012/name``.

    Pass the SQS client's ``meta.endpoint_url`` as ``endpoint`` so the URL matches whatever endpoint
    the client talks to (AWS, a VPC endpoint or a local emulator).
    """
    parts = arn.split(":")
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "sqs" or not all(parts[1:2] + parts[3:]):
        raise ValueError(f"not an SQS queue ARN: {arn!r}")
    _, partition, _, region, account, name = parts
    if endpoint:
        return f"{endpoint.rstrip('/')}/{account}/{name}"
    suffix = "amazonaws.com.cn" if partition == "aws-cn" else "amazonaws.com"
    return f"https://sqs.{region}.{suffix}/{account}/{name}"


def allowlisted(reference: str, allowlist: Iterable[str]) -> bool:
    """True when ``reference`` (queue ARN or URL) names a queue of ``allowlist`` (ARNs or URLs)."""
    identity = queue_identity(reference)
    return identity is not None and any(
        entry is not None and same_queue(identity, entry) for entry in map(queue_identity, allowlist)
    )


def attribute_bytes(attributes: SendAttributes) -> int:
    """Size SQS counts for message attributes: name + type + value."""
    total = 0
    for name, value in attributes.items():
        total += len(name.encode()) + len(str(value.get("DataType", "")).encode())
        if value.get("BinaryValue") is not None:
            total += len(value["BinaryValue"])
        else:
            total += len(str(value.get("StringValue", "")).encode())
    return total
