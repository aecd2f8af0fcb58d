"""The partial-batch consumer: idempotent records, permanent/transient failures, claim checks,
a visibility heartbeat and per-message backoff.

``Consumer.from_env(process, model=Order, ...)`` at cold start, ``consumer.handle(event, context)`` per
invocation; business code receives a :class:`SluiceRecord` (see docs/consumer.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._lazy import lazy_exports

if TYPE_CHECKING:
    from sluice.consumer.batch import Consumer
    from sluice.consumer.heartbeat import Heartbeat, InFlight
    from sluice.consumer.idempotency import Idempotency, InProgressElsewhere
    from sluice.consumer.record import Processor, SluiceRecord
    from sluice.consumer.settings import ConsumerSettings

REQUIRES: tuple[str, ...] = ("delay",)  # record.later sends through it (imported when asked)
"""The capabilities this one may import besides the shared core (checked by tests/unit/test_imports.py)."""

__all__ = [
    "Consumer",
    "ConsumerSettings",
    "Heartbeat",
    "Idempotency",
    "InFlight",
    "InProgressElsewhere",
    "Processor",
    "SluiceRecord",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Consumer": "batch",
        "Processor": "record",
        "SluiceRecord": "record",
        "ConsumerSettings": "settings",
        "Heartbeat": "heartbeat",
        "InFlight": "heartbeat",
        "Idempotency": "idempotency",
        "InProgressElsewhere": "idempotency",
    },
)
