"""boto3 clients, created on first use (a command only pays for the services it calls)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

import boto3

if TYPE_CHECKING:
    from mypy_boto3_cloudformation import CloudFormationClient
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from mypy_boto3_sqs import SQSClient

DEFAULT_REGION = "us-east-1"


class Clients:
    """One client per service, from ``make(service_name)``; tests pass moto or Stubber clients."""

    def __init__(self, make: Callable[[str], Any]) -> None:
        self._make = make

    @classmethod
    def from_session(cls, session: boto3.Session, *, endpoint_url: str | None = None) -> Clients:
        """Clients of ``session``; ``endpoint_url`` None leaves boto3 to honour ``AWS_ENDPOINT_URL``."""

        def make(service: str) -> Any:
            return session.client(service, endpoint_url=endpoint_url)  # type: ignore[call-overload]

        return cls(make)

    @classmethod
    def of(cls, **clients: Any) -> Clients:
        """Fixed clients by service name (``lambda_`` for Lambda); any other service is an error."""
        by_service = {name.rstrip("_"): client for name, client in clients.items()}

        def make(service: str) -> Any:
            if service not in by_service:
                raise LookupError(f"no {service} client was given")
            return by_service[service]

        return cls(make)

    @cached_property
    def sqs(self) -> SQSClient:
        return cast("SQSClient", self._make("sqs"))

    @cached_property
    def s3(self) -> S3Client:
        return cast("S3Client", self._make("s3"))

    @cached_property
    def dynamodb(self) -> DynamoDBClient:
        return cast("DynamoDBClient", self._make("dynamodb"))

    @cached_property
    def lambda_(self) -> LambdaClient:
        return cast("LambdaClient", self._make("lambda"))

    @cached_property
    def secretsmanager(self) -> SecretsManagerClient:
        return cast("SecretsManagerClient", self._make("secretsmanager"))

    @cached_property
    def cloudformation(self) -> CloudFormationClient:
        return cast("CloudFormationClient", self._make("cloudformation"))
