"""A DynamoDB table keyed by ``id`` in moto, as sluice's breaker table (and its run lease) is made."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
from moto import mock_aws


@contextmanager
def id_table(name: str) -> Iterator[Any]:
    """A client of in-process DynamoDB holding the table ``name`` (partition key ``id``)."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=name,
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client
