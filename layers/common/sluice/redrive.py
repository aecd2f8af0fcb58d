"""Redrive planning: what to do with one message taken from a dead-letter queue.

Shared by the redriver Lambda and the redrive state machine's Plan step (both arrive with the DLQ
redrive capability), so the two modes decide identically:

- ``attempt = envelope.attempts + 1`` (the failed delivery cycles so far, plus this one);
- ``attempt > max_attempts`` → the message is a poison pill: isolate it;
- otherwise wait a capped full-jitter delay ``uniform(floor, min(cap, base · 2^attempt))`` before
  re-driving it to its source queue: straight there with ``DelaySeconds`` when the delay is within the
  direct-send threshold (≤ 900 s, SQS's limit), through the long-delay pipeline beyond it.

The source queue comes from the ``DeadLetterQueueSourceArn`` system attribute when SQS provides it,
else from the configured default; only allowlisted sources are ever written to.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sluice.backoff import Uniform
from sluice.errors import PermanentError
from sluice.sqs import queue_identity, same_queue

SQS_MAX_DELAY = 900
MAX_BACKOFF_SECONDS = 365 * 86_400  # the long-delay pipeline's limit
SOURCE_ATTRIBUTE = "DeadLetterQueueSourceArn"


@dataclass(frozen=True)
class RedrivePlan:
    attempt: int
    poison: bool
    delay_seconds: int
    """Whole seconds to wait before the message is visible again on its source (0 when poison)."""
    via_delay_pipeline: bool
    """True when the delay exceeds the direct-send threshold (SQS's DelaySeconds cannot hold it)."""


def plan(
    attempts_so_far: int,
    *,
    max_attempts: int,
    base: float,
    cap: float,
    floor: float = 0.0,
    direct_send_threshold: int = SQS_MAX_DELAY,
    uniform: Uniform = random.uniform,
) -> RedrivePlan:
    """The decision for a message whose envelope says ``attempts_so_far`` cycles have failed."""
    if attempts_so_far < 0:
        raise ValueError(f"attempts cannot be negative, got {attempts_so_far}")
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
    if not 0 <= floor <= cap:
        raise ValueError(f"need 0 <= floor <= cap, got floor={floor} cap={cap}")
    if not 1 <= direct_send_threshold <= SQS_MAX_DELAY:
        raise ValueError(f"direct_send_threshold must be within 1..{SQS_MAX_DELAY}")
    attempt = attempts_so_far + 1
    if attempt > max_attempts:
        return RedrivePlan(attempt=attempt, poison=True, delay_seconds=0, via_delay_pipeline=False)
    top = min(cap, base * 2.0 ** min(attempt, 64))
    delay = uniform(floor, max(floor, top))
    seconds = min(MAX_BACKOFF_SECONDS, int(-(-delay // 1)))  # whole seconds, rounded up: keeps the floor
    return RedrivePlan(
        attempt=attempt,
        poison=False,
        delay_seconds=seconds,
        via_delay_pipeline=seconds > direct_send_threshold,
    )


def source_queue(
    system_attributes: Mapping[str, Any] | None,
    *,
    default: str | None,
    allowlist: Iterable[str],
) -> str:
    """The queue to re-drive to: SQS's ``DeadLetterQueueSourceArn`` when present, else ``default``.

    Raises :class:`~sluice.errors.PermanentError` when there is none or it is not allowlisted
    (a message must never choose where it is re-driven to).
    """
    source = (system_attributes or {}).get(SOURCE_ATTRIBUTE) or default
    if not source:
        raise PermanentError("no source queue: no DeadLetterQueueSourceArn and no default source configured")
    identity = queue_identity(str(source))
    allowed = [queue_identity(entry) for entry in allowlist]
    if identity is None or not any(a is not None and same_queue(identity, a) for a in allowed):
        raise PermanentError(f"source queue {source!r} is not in the redrive allowlist")
    return str(source)
