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
