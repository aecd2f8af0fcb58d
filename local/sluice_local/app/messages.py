"""The example app's messages, as the demo, the soak and the e2e tests send them."""

from __future__ import annotations

import json
from typing import Any

from sluice import claimcheck

ORDERS = "Orders"
"""The example workload (examples/orders/): its outputs are ``Orders<Output>`` (``OrdersQueueUrl``, ...)."""
REFUNDS = "Refunds"
"""The second example workload (examples/refunds/): refunds whose ids take the orders' values."""


def order(order_id: str, **extra: Any) -> dict[str, Any]:
    """A valid order for the example processor (examples/orders/processor.py ``Order``)."""
    return {
        "order_id": order_id,
        "customer_id": "cust-demo",
        "amount_cents": 1999,
        "currency": "EUR",
        **extra,
    }


def claim_check(bucket: str, key: str) -> str:
    """A body pointing at an S3 object in sluice's simple claim-check format (docs/claim-check.md);
    the object need not exist yet."""
    return json.dumps({"__type": claimcheck.SIMPLE_TYPE, "s3_bucket": bucket, "s3_key": key})
