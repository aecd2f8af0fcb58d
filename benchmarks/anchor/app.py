"""Anchor for ``cold_start.py --invoke``: the consumer's job written with Powertools alone.

The same work as examples/orders/app.py + processor.py on the same events: Logger, Metrics and
Tracer on the handler; ``BatchProcessor(EventType.SQS)`` + ``process_partial_response``; each body
is JSON-decoded and validated with the same pydantic ``Order`` model (a copy: importing processor.py
would import the sluice layer; cold_start.py checks that the two class definitions are identical);
each order is processed at most once (``idempotent_function`` on DynamoDB keyed on ``order_id``,
the template's default ``IdempotencyKeyJmesPath``, with the payload validated as sluice does), and
each side effect (charge, reward, notify) is guarded by its own idempotency record, as
``record.once`` does. Both idempotency stores share one DynamoDB client of boto3's default session,
as the sluice consumer does, and use the same table and TTL. When ``LEDGER_TABLE_NAME`` is set (the
example processor of this tree writes one ledger item per side effect), each side effect writes the
same ledger item through a copy of processor.Ledger (also checked identical by cold_start.py). At
import it reads the stack's envelope key once with Powertools' ``parameters.get_secret``, the
equivalent of sluice's key read (which also reads the key's previous version).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities import parameters
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, Field

logger = Logger()
metrics = Metrics()
tracer = Tracer()

SINGLE_ORDER_LIMIT_CENTS = 1_000_000
TABLE = os.environ["SLUICE_IDEMPOTENCY_TABLE"]
TTL_SECONDS = int(os.environ.get("SLUICE_IDEMPOTENCY_TTL_SECONDS", str(14 * 24 * 3600)))


class Order(BaseModel):
    order_id: str = Field(min_length=1, max_length=128)
    customer_id: str = Field(min_length=1, max_length=128)
    amount_cents: int = Field(gt=0)
    currency: Literal["EUR", "USD", "GBP"]
    reward_points: int = Field(default=0, ge=0)


class Ledger:
    """The example's stand-in for a real integration: one DynamoDB item per side effect performed.

    Partition key ``effect_key`` = ``<order id>#<effect>``, sort key ``execution_id`` = a new id each
    time the effect is performed (so two performances are two items), plus ``order_id``, ``effect``,
    ``performed_at`` (ISO 8601, UTC), ``request_id`` (the Lambda invocation's) and the effect's details.
    """

    def __init__(self, table: str, dynamodb: Any) -> None:
        self._table = table
        self._dynamodb = dynamodb
        self.request_id = ""
        """The Lambda request id of the invocation in progress (app.py sets it per invocation)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Ledger:
        """At cold start: the table named by ``LEDGER_TABLE_NAME``."""
        import boto3  # noqa: PLC0415 - only the cold start builds the client

        return cls(environ["LEDGER_TABLE_NAME"], boto3.client("dynamodb"))

    def record(self, order_id: str, effect: str, **details: str | int) -> None:
        item = {
            "effect_key": {"S": f"{order_id}#{effect}"},
            "execution_id": {"S": str(uuid.uuid4())},
            "order_id": {"S": order_id},
            "effect": {"S": effect},
            "performed_at": {"S": datetime.now(UTC).isoformat()},
            "request_id": {"S": self.request_id},
        }
        for name, value in details.items():
            item[name] = {"N": str(value)} if isinstance(value, int) else {"S": value}
        self._dynamodb.put_item(TableName=self._table, Item=item)


ledger = Ledger.from_env(os.environ) if "LEDGER_TABLE_NAME" in os.environ else None
dynamodb = boto3.client("dynamodb")
# What sluice's handler also does at cold start where Powertools has the equivalent: the stack's envelope
# key read from Secrets Manager (SLUICE_ENVELOPE_KEY_SECRET), as a Powertools-only consumer checking what
# its producers attach would read its key. Once: sluice also reads the key's previous version (rotation),
# one GetSecretValue more, which stays in its total.
signing_key = parameters.get_secret(os.environ["SLUICE_ENVELOPE_KEY_SECRET"])
order_config = IdempotencyConfig(
    event_key_jmespath="order_id",
    payload_validation_jmespath="@",
    expires_after_seconds=TTL_SECONDS,
    raise_on_no_idempotency_key=True,
)
effect_config = IdempotencyConfig(
    event_key_jmespath="order_id", expires_after_seconds=TTL_SECONDS, raise_on_no_idempotency_key=True
)
# Powertools keeps the configuration on the persistence object: one store per configuration.
order_store = DynamoDBPersistenceLayer(table_name=TABLE, boto3_client=dynamodb)
effect_store = DynamoDBPersistenceLayer(table_name=TABLE, boto3_client=dynamodb)
batch = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
once_per_order = idempotent_function(
    data_keyword_argument="order", persistence_store=order_store, config=order_config
)
once_per_effect = idempotent_function(
    data_keyword_argument="effect", persistence_store=effect_store, config=effect_config
)


@once_per_effect  # type: ignore[untyped-decorator]
def charge(effect: dict[str, Any]) -> dict[str, object]:
    if ledger is not None:
        ledger.record(
            effect["order_id"], "charge", amount_cents=effect["amount_cents"], currency=effect["currency"]
        )
    logger.info(
        "charged",
        extra={
            "order_id": effect["order_id"],
            "customer_id": effect["customer_id"],
            "amount_cents": effect["amount_cents"],
            "currency": effect["currency"],
        },
    )
    return {"charged_cents": effect["amount_cents"]}


@once_per_effect  # type: ignore[untyped-decorator]
def grant_reward(effect: dict[str, Any]) -> None:
    if ledger is not None:
        ledger.record(effect["order_id"], "reward", points=effect["points"])
    logger.info(
        "reward granted",
        extra={
            "order_id": effect["order_id"],
            "customer_id": effect["customer_id"],
            "points": effect["points"],
        },
    )


@once_per_effect  # type: ignore[untyped-decorator]
def notify(effect: dict[str, Any]) -> None:
    if ledger is not None:
        ledger.record(effect["order_id"], "notify", customer_id=effect["customer_id"])
    logger.info(
        "customer notified", extra={"customer_id": effect["customer_id"], "order_id": effect["order_id"]}
    )


@once_per_order  # type: ignore[untyped-decorator]
def settle(order: Order) -> None:
    if order.amount_cents > SINGLE_ORDER_LIMIT_CENTS:
        raise ValueError(f"order {order.order_id} exceeds the single-order limit")
    charge(
        effect={
            "order_id": order.order_id,
            "customer_id": order.customer_id,
            "amount_cents": order.amount_cents,
            "currency": order.currency,
        }
    )
    if order.reward_points:
        grant_reward(
            effect={
                "order_id": order.order_id,
                "customer_id": order.customer_id,
                "points": order.reward_points,
            }
        )
    notify(effect={"order_id": order.order_id, "customer_id": order.customer_id})


def record_handler(record: SQSRecord) -> None:
    settle(order=Order.model_validate(json.loads(record.body)))


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if ledger is not None:
        ledger.request_id = context.aws_request_id
    order_config.register_lambda_context(context)
    effect_config.register_lambda_context(context)
    response = process_partial_response(
        event=event, record_handler=record_handler, processor=batch, context=context
    )
    failed = len(response["batchItemFailures"])
    metrics.add_metric(name="RecordsProcessed", unit=MetricUnit.Count, value=len(event["Records"]) - failed)
    metrics.add_metric(name="RecordsFailed", unit=MetricUnit.Count, value=failed)
    logger.info("batch done", extra={"records": len(event["Records"]), "failed": failed})
    return dict(response)
