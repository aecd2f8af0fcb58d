"""What the delay state machine and the rehydrator hand each other (``statemachines/delay.asl.json``).

The parker starts one execution per due-time bucket with :class:`DelayExecution` as its input; the
Rehydrate Task calls the rehydrator with :class:`RehydrateRequest`, which answers
:class:`RehydrateResult` (``more`` loops the Task). ``tests/unit/test_asl_contracts.py`` checks every
JSONPath of the definition against these.
"""

from __future__ import annotations

from typing import Required, TypedDict

__all__ = [
    "DelayExecution",
    "RehydrateRequest",
    "RehydrateResult",
    "RehydratorEvent",
    "ScheduledDelivery",
    "ScheduledEvent",
    "SweepRequest",
]


class DelayExecution(TypedDict):
    """A bucket's execution input (:func:`sluice.delay.schedule.execution_input`)."""

    bucket: int
    """Epoch second at which the bucket opens."""
    prefix: str
    """The bucket's S3 prefix, ``<delay prefix><bucket>/``."""
    wake_at: str
    """The bucket's time, ISO 8601 UTC (the Wait state's ``TimestampPath``)."""


class RehydrateRequest(TypedDict):
    """The Rehydrate Task's input: the bucket to send."""

    bucket: int
    prefix: str


class ScheduledDelivery(TypedDict):
    """A delay schedule's input to the rehydrator (``sluice.delay.scheduler``): its name and messages,
    in the parked-object format (``sluice.delay.schedule.encode_object``)."""

    scheduled: str
    parked: dict[str, object]


class SweepRequest(TypedDict):
    """The scheduled sweep's input (a plain scheduled EventBridge event means a sweep too)."""

    sweep: bool


ScheduledEvent = TypedDict(
    "ScheduledEvent",
    {"source": Required[str], "detail-type": Required[str], "time": str, "id": str, "detail": object},
    total=False,
)
"""An EventBridge (or Scheduler) scheduled event, as a rule without Input sends it: a sweep."""

RehydratorEvent = RehydrateRequest | ScheduledDelivery | SweepRequest | ScheduledEvent
"""Everything the rehydrator is called with."""


class RehydrateResult(TypedDict):
    """The rehydrator's answer; ``more`` when objects remain under the prefix (the deadline came)."""

    more: bool
    sent: int
    objects: int
