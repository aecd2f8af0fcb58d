"""The example app's messages, as the demo, the soak and the e2e tests send them."""

from __future__ import annotations

import json
from typing import Any

from sluice import claimcheck

ORDERS = "Orders"
"""The example workload (examples/orders/): its outputs are ``Orders<Output>`` (``OrdersQueueUrl``, ...)."""
REFUNDS = "Refunds"
"""The second example workload (examples/refunds/): refunds whose ids take the orders' values."""

REFUND_LEDGER_PREFIX = "refund:"
"""How the refunds' ledger items are keyed apart from the orders' (``refund:<refund id>#repay``,
examples/refunds/processor.py ``LEDGER_PREFIX``)."""


def order(order_id: str, **extra: Any) -> dict[str, Any]:
    """A valid order for the example processor (examples/orders/processor.py ``Order``)."""
    return {
        "order_id": order_id,
        "customer_id": "cust-demo",
        "amount_cents": 1999,
        "currency": "EUR",
        **extra,
    }


def refund(refund_id: str, **extra: Any) -> dict[str, Any]:
    """A valid refund for the second example (examples/refunds/processor.py ``Refund``): it refunds the
    order of the same id value (the examples' ids take the same values on purpose)."""
    return {"refund_id": refund_id, "order_id": refund_id, "amount_cents": 500, "currency": "EUR", **extra}


def claim_check(bucket: str, key: str) -> str:
    """A body pointing at an S3 object in sluice's simple claim-check format (docs/claim-check.md);
    the object need not exist yet."""
    return json.dumps({"__type": claimcheck.SIMPLE_TYPE, "s3_bucket": bucket, "s3_key": key})
