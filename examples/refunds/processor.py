"""Business logic of the second example workload: refunds.

A refund's body carries ``refund_id`` (its idempotency key, ``KeyPath: refund_id`` in template.yaml's
Mappings.Workloads) and the ``order_id`` it refunds. The example's ids take the same values as the
orders' (``o-1`` is an order in one workload and a refund in the other): the two workloads' idempotency
keys and side-effect guards never meet, because each workload's consumer keys them under its own
function's name.

The one side effect, paying the money back, is guarded by ``record.once`` and written to the example
ledger as ``refund:<refund id>#repay`` (the orders' items are ``<order id>#<effect>``), so a repayment
that really happened twice shows as two items.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from aws_lambda_powertools import Logger
from pydantic import BaseModel, Field

from sluice.consumer import SluiceRecord
from sluice.errors import PermanentError

logger = Logger(child=True)

REPAY = "repay"
LEDGER_PREFIX = "refund:"


class Refund(BaseModel):
    refund_id: str = Field(min_length=1, max_length=128)
    order_id: str = Field(min_length=1, max_length=128)
    amount_cents: int = Field(gt=0)
    currency: Literal["EUR", "USD", "GBP"]
    reason: str = Field(default="", max_length=500)


class Refunds:
    """Repays a refund at most once, whatever the redeliveries, retries and redrives."""

    def __init__(self, ledger_table: str, dynamodb: Any) -> None:
        self._table = ledger_table
        self._dynamodb = dynamodb
        self.request_id = ""

    def process(self, record: SluiceRecord) -> None:
        refund: Refund = record.data
        if refund.reason == "fraud":
            raise PermanentError(f"refund {refund.refund_id} is flagged as fraud: not repaid")
        record.once(REPAY, self.repay, refund)

    def repay(self, refund: Refund) -> dict[str, int]:
        """Pay the money back (a payment provider's call in a real integration)."""
        self._dynamodb.put_item(
            TableName=self._table,
            Item={
                "effect_key": {"S": f"{LEDGER_PREFIX}{refund.refund_id}#{REPAY}"},
                "execution_id": {"S": str(uuid.uuid4())},
                "order_id": {"S": refund.order_id},
                "effect": {"S": REPAY},
                "performed_at": {"S": datetime.now(UTC).isoformat()},
                "request_id": {"S": self.request_id},
                "amount_cents": {"N": str(refund.amount_cents)},
            },
        )
        logger.info(
            "refund repaid", extra={"refund_id": refund.refund_id, "amount_cents": refund.amount_cents}
        )
        return {"repaid_cents": refund.amount_cents}
