"""Small SQS helpers shared by every function."""

from __future__ import annotations


def queue_identity(reference: str) -> tuple[str, str] | None:
    """(account, queue name) of a queue URL or ARN; None when it is neither."""
    if reference.startswith("arn:"):
        parts = reference.split(":")
        if len(parts) == 6 and parts[2] == "sqs" and parts[4] and parts[5]:
            return parts[4], parts[5]
        return None
    if reference.startswith(("https://", "http://")):
        path = reference.split("://", 1)[1].split("?", 1)[0].rstrip("/").split("/")
        if len(path) >= 3 and path[-2] and path[-1]:
            return path[-2], path[-1]
    return None


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
