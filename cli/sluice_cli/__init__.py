"""``sluice``: the operator CLI (dead-letter queue, poison queue, redrive breaker). Never deployed.

It finds every resource from the stack's outputs, so the same commands work against AWS and against
the local runtime (``python -m sluice_local up`` exports ``AWS_ENDPOINT_URL``). See docs/operations.md.
"""

from __future__ import annotations

OK = 0
PARTIAL_FAILURE = 1
USAGE_ERROR = 2


class CliError(Exception):
    """A failure the CLI reports as one line on stderr, with its exit code."""

    def __init__(self, message: str, code: int = USAGE_ERROR) -> None:
        super().__init__(message)
        self.code = code
