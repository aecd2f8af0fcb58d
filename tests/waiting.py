"""Waiting for a condition in the e2e tests: polled under a deadline, never a sleep standing in for it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 90.0, *, every: float = 0.2) -> Any:
    """``condition()``'s first truthy value, looked at every ``every`` seconds; fails naming ``what`` when
    ``timeout`` (a deadline for a loaded 2-core machine, not a wait) passes first."""
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(every)  # between two looks at the condition
    return found


def finished_execution(sfn: Any, execution_arn: str, timeout: float = 90.0) -> dict[str, Any]:
    """A Step Functions execution's description once it has ended. moto marks an execution SUCCEEDED a
    moment before it stores the output (its ``_reflect_execution_status``), which AWS never shows: a
    SUCCEEDED description without ``output`` is looked at again (a CI run on a loaded machine read one)."""

    def ended() -> dict[str, Any] | None:
        described: dict[str, Any] = sfn.describe_execution(executionArn=execution_arn)
        if described["status"] == "RUNNING" or (
            described["status"] == "SUCCEEDED" and "output" not in described
        ):
            return None
        return described

    return dict(wait_for(ended, f"execution {execution_arn} ended", timeout, every=0.05))
