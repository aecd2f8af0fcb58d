"""Capped full-jitter backoff (AWS Architecture Blog, "Exponential Backoff And Jitter")."""

from __future__ import annotations

import random
from collections.abc import Callable

from sluice.limits import MAX_VISIBILITY_SECONDS

Uniform = Callable[[float, float], float]


def ceiling(attempt: int, *, base: float, cap: float) -> float:
    """Upper bound of the jitter window for ``attempt`` (1-based): ``min(cap, base * 2**(attempt-1))``."""
    if attempt < 1:
        raise ValueError(f"attempt is 1-based, got {attempt}")
    # 2**1100 overflows a float; past 64 doublings every sane cap has been reached.
    return min(cap, base * 2.0 ** min(attempt - 1, 64))


def full_jitter(
    attempt: int,
    *,
    base: float,
    cap: float,
    floor: float = 0.0,
    uniform: Uniform = random.uniform,
) -> int:
    """Seconds to wait before retry ``attempt``: ``max(floor, uniform(0, ceiling))`` as whole seconds.

    Whole seconds because SQS visibility and delay are integral; rounding up keeps the floor.
    Never more than 12 hours (SQS's visibility limit).
    """
    top = ceiling(attempt, base=base, cap=cap)
    return whole_seconds(max(floor, uniform(0.0, top)), limit=MAX_VISIBILITY_SECONDS)


def whole_seconds(delay: float, *, limit: int) -> int:
    """``delay`` rounded up to whole seconds (SQS delays and visibility are integral; rounding up keeps
    a floor), at most ``limit``."""
    return min(limit, int(-(-delay // 1)))  # ceil without importing math
