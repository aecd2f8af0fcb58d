"""Business logic: the one place a team edits. This example settles orders.

``process`` receives a :class:`sluice.consumer.SluiceRecord` whose ``data`` is an :class:`Order`
(the body was validated against it; an invalid body never reaches here, it goes to the poison
queue). The consumer already makes the whole record idempotent, but a record can still fail AFTER
one of its side effects happened (notify times out after the card was charged) and be retried. So
each side effect is guarded by its own idempotency key with ``record.once(name, fn, ...)``: a retry,
a redelivery or a redrive never charges, grants or notifies twice.

Raise ``PermanentError`` when retrying cannot help (the record goes to the poison queue with the
reason), ``TransientError`` / ``RetryAfter(seconds)`` when it can; any other exception is retried.
"""

from __future__ import annotations

from typing import Literal

from aws_lambda_powertools import Logger
from pydantic import BaseModel, Field

from sluice.consumer import SluiceRecord
from sluice.errors import PermanentError

logger = Logger(child=True)

SINGLE_ORDER_LIMIT_CENTS = 1_000_000


class Order(BaseModel):
    order_id: str = Field(min_length=1, max_length=128)
    customer_id: str = Field(min_length=1, max_length=128)
    amount_cents: int = Field(gt=0)
    currency: Literal["EUR", "USD", "GBP"]
    reward_points: int = Field(default=0, ge=0)


def charge(order_id: str, customer_id: str, amount_cents: int, currency: str) -> dict[str, object]:
    """Deduct the customer's budget (here: the ledger line an integration would write)."""
    logger.info(
        "charged",
        extra={
            "order_id": order_id,
            "customer_id": customer_id,
            "amount_cents": amount_cents,
            "currency": currency,
        },
    )
    return {"charged_cents": amount_cents}


def grant_reward(order_id: str, customer_id: str, points: int) -> None:
    logger.info("reward granted", extra={"order_id": order_id, "customer_id": customer_id, "points": points})


def notify(customer_id: str, order_id: str) -> None:
    logger.info("customer notified", extra={"customer_id": customer_id, "order_id": order_id})


def process(record: SluiceRecord) -> None:
    order: Order = record.data
    if order.amount_cents > SINGLE_ORDER_LIMIT_CENTS:
        raise PermanentError(
            f"order {order.order_id} exceeds the single-order limit of {SINGLE_ORDER_LIMIT_CENTS} cents"
        )
    record.once("charge", charge, order.order_id, order.customer_id, order.amount_cents, order.currency)
    if order.reward_points:
        record.once("reward", grant_reward, order.order_id, order.customer_id, order.reward_points)
    record.once("notify", notify, order.customer_id, order.order_id)
