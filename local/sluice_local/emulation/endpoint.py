"""Reaching the embedded AWS: a client for its endpoint with the local dummy credentials, a free port."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

import boto3
from botocore.config import Config

__all__ = ["endpoint_client", "free_port"]


def endpoint_client(
    service: str, endpoint: str, region: str = "us-east-1", credentials: Mapping[str, str] | None = None
) -> Any:
    """A boto3 client for the embedded endpoint (or any other), with the local dummy credentials (the
    administrator's) or ``credentials`` (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
    ``AWS_SESSION_TOKEN``: a role's session)."""
    given = credentials or {}
    return boto3.client(
        service,  # type: ignore[call-overload]
        region_name=region,
        endpoint_url=endpoint,
        aws_access_key_id=given.get("AWS_ACCESS_KEY_ID", "testing"),
        aws_secret_access_key=given.get("AWS_SECRET_ACCESS_KEY", "testing"),
        aws_session_token=given.get("AWS_SESSION_TOKEN"),
        config=Config(retries={"max_attempts": 3, "mode": "standard"}),
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
