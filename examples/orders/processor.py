"""Business logic: the one place a team edits. This example settles orders.

``Settlement.process`` receives a :class:`sluice.consumer.SluiceRecord` whose ``data`` is an
:class:`Order` (the body was validated against it; an invalid body never reaches here, it goes to the
poison queue). The consumer already makes the whole record idempotent, but a record can still fail
AFTER one of its side effects happened (notify times out after the card was charged) and be retried.
So each side effect is guarded by its own idempotency key with ``record.once(name, fn, ...)``: a
retry, a redelivery or a redrive never charges, grants or notifies twice.

The side effects themselves are stand-ins: where a real integration would call a payment provider, a
loyalty service or an email sender, this example writes one item per side effect it performs to a
DynamoDB ledger (:class:`Ledger`, ``LedgerTable`` in template.yaml). A side effect that really
happened twice shows there as two items, which is how ``make demo`` and the e2e tests check that
none did. Replace the ledger calls with your integration's.

Raise ``PermanentError`` when retrying cannot help (the record goes to the poison queue with the
reason), ``TransientError`` / ``RetryAfter(seconds)`` when it can; any other exception is retried.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from aws_lambda_powertools import Logger
from pydantic import BaseModel, Field

from sluice.consumer import SluiceRecord
from sluice.errors import PermanentError

logger = Logger(child=True)

SINGLE_ORDER_LIMIT_CENTS = 1_000_000

# The side effects' names: each one's idempotency key (record.once) and its ledger entry.
CHARGE = "charge"
REWARD = "reward"
NOTIFY = "notify"


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


class Settlement:
    """Settles an order: charge it, grant its reward points, notify the customer — each at most once."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def process(self, record: SluiceRecord) -> None:
        order: Order = record.data
        if order.amount_cents > SINGLE_ORDER_LIMIT_CENTS:
            raise PermanentError(
                f"order {order.order_id} exceeds the single-order limit of {SINGLE_ORDER_LIMIT_CENTS} cents"
            )
        record.once(CHARGE, self.charge, order)
        if order.reward_points:
            record.once(REWARD, self.grant_reward, order)
        record.once(NOTIFY, self.notify, order)

    def charge(self, order: Order) -> dict[str, object]:
        """Deduct the customer's budget (a payment provider's call in a real integration)."""
        self.ledger.record(order.order_id, CHARGE, amount_cents=order.amount_cents, currency=order.currency)
        logger.info(
            "charged",
            extra={
                "order_id": order.order_id,
                "customer_id": order.customer_id,
                "amount_cents": order.amount_cents,
                "currency": order.currency,
            },
        )
        return {"charged_cents": order.amount_cents}

    def grant_reward(self, order: Order) -> None:
        self.ledger.record(order.order_id, REWARD, points=order.reward_points)
        logger.info(
            "reward granted",
            extra={
                "order_id": order.order_id,
                "customer_id": order.customer_id,
                "points": order.reward_points,
            },
        )

    def notify(self, order: Order) -> None:
        self.ledger.record(order.order_id, NOTIFY, customer_id=order.customer_id)
        logger.info("customer notified", extra={"customer_id": order.customer_id, "order_id": order.order_id})
