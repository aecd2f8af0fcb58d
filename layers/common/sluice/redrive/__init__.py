"""DLQ redrive: one decision per dead-lettered message (:func:`decide`: backoff, delay pipeline or
poison), run by the :class:`Redriver` Lambda or by the redrive state machine's steps, held back by a
:class:`Breaker`; one :class:`Redriver` run at a time per workload by a :class:`RunLease` (see
docs/redrive.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._lazy import lazy_exports

if TYPE_CHECKING:
    from sluice.redrive.breaker import Breaker, BreakerPolicy, BreakerState, BreakerStatus
    from sluice.redrive.isolator import IsolatorSettings, isolate_request, metrics_service
    from sluice.redrive.lease import HeldLease, Refusal, RunLease
    from sluice.redrive.plan import Decision, DlqMessage, RedrivePlan, decide
    from sluice.redrive.runner import Redriver, RedriveReport
    from sluice.redrive.settings import BreakerSettings, RedriveSettings
    from sluice.redrive.steps import plan_step, refusal_step

REQUIRES: tuple[str, ...] = ()
"""The capabilities this one may import besides the shared core (checked by tests/unit/test_imports.py)."""

__all__ = [
    "Breaker",
    "BreakerPolicy",
    "BreakerSettings",
    "BreakerState",
    "BreakerStatus",
    "Decision",
    "DlqMessage",
    "HeldLease",
    "IsolatorSettings",
    "RedrivePlan",
    "RedriveReport",
    "RedriveSettings",
    "Redriver",
    "Refusal",
    "RunLease",
    "decide",
    "isolate_request",
    "metrics_service",
    "plan_step",
    "refusal_step",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Breaker": "breaker",
        "BreakerPolicy": "breaker",
        "BreakerState": "breaker",
        "BreakerStatus": "breaker",
        "IsolatorSettings": "isolator",
        "isolate_request": "isolator",
        "metrics_service": "isolator",
        "HeldLease": "lease",
        "Refusal": "lease",
        "RunLease": "lease",
        "Decision": "plan",
        "DlqMessage": "plan",
        "RedrivePlan": "plan",
        "decide": "plan",
        "RedriveReport": "runner",
        "Redriver": "runner",
        "BreakerSettings": "settings",
        "RedriveSettings": "settings",
        "plan_step": "steps",
        "refusal_step": "steps",
    },
)
