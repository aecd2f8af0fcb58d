"""Long delays (up to a year): ``send_delayed`` → batch-delay (:class:`BatchDelay`, the parker) → S3,
one delay state machine execution per due-time bucket → :class:`Rehydrator` (see docs/delays.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._lazy import lazy_exports

if TYPE_CHECKING:
    from sluice.delay.parker import BatchDelay
    from sluice.delay.rehydrator import Rehydrator
    from sluice.delay.schedule import (
        Parked,
        check_target,
        decode_object,
        encode_object,
        requested_due,
        send_delayed,
    )
    from sluice.delay.settings import DelaySettings

REQUIRES: tuple[str, ...] = ()
"""The capabilities this one may import besides the shared core (checked by tests/unit/test_imports.py)."""

__all__ = [
    "BatchDelay",
    "DelaySettings",
    "Parked",
    "Rehydrator",
    "check_target",
    "decode_object",
    "encode_object",
    "requested_due",
    "send_delayed",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BatchDelay": "parker",
        "Rehydrator": "rehydrator",
        "Parked": "schedule",
        "check_target": "schedule",
        "decode_object": "schedule",
        "encode_object": "schedule",
        "requested_due": "schedule",
        "send_delayed": "schedule",
        "DelaySettings": "settings",
    },
)
