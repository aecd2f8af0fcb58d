"""Capped full-jitter backoff (sluice.backoff) and the bounds of RetryAfter (sluice.errors)."""

from __future__ import annotations

import math
import random

import pytest

from sluice.backoff import ceiling, full_jitter
from sluice.errors import RetryAfter, TransientError
from sluice.limits import MAX_VISIBILITY_SECONDS


def _top(low: float, high: float) -> float:
    return high


def _bottom(low: float, high: float) -> float:
    return low


@pytest.mark.parametrize(("base", "cap", "floor"), [(2, 300, 1), (0.5, 30, 0), (3, 900, 7.5), (1, 5, -3)])
def test_given_a_seeded_uniform_when_many_attempts_then_every_delay_is_within_floor_and_ceiling(
    base: float, cap: float, floor: float
) -> None:
    rng = random.Random(20240601)
    for attempt in range(1, 200):
        top = min(cap, base * 2 ** min(attempt - 1, 64))
        delay = full_jitter(attempt, base=base, cap=cap, floor=floor, uniform=rng.uniform)

        assert isinstance(delay, int)
        assert math.ceil(max(floor, 0)) <= delay <= math.ceil(max(floor, top)), attempt


def test_given_an_injected_uniform_when_computing_then_it_draws_between_zero_and_the_ceiling() -> None:
    calls: list[tuple[float, float]] = []

    def recording(low: float, high: float) -> float:
        calls.append((low, high))
        return high / 2

    delay = full_jitter(4, base=2, cap=300, uniform=recording)

    assert calls == [(0.0, 16.0)]
    assert delay == 8


def test_given_a_fractional_draw_when_computing_then_it_is_rounded_up_to_whole_seconds() -> None:
    assert full_jitter(3, base=2, cap=300, uniform=lambda low, high: 2.01) == 3


def test_given_the_ceiling_grows_when_attempts_increase_then_it_doubles_until_the_cap() -> None:
    assert [ceiling(n, base=2, cap=20) for n in range(1, 7)] == [2, 4, 8, 16, 20, 20]


def test_given_a_draw_at_the_top_when_capped_then_the_delay_never_exceeds_the_cap() -> None:
    for attempt in (1, 5, 10, 30, 64, 65, 1000):
        assert full_jitter(attempt, base=2, cap=300, uniform=_top) <= 300


def test_given_a_draw_of_zero_when_a_floor_is_set_then_the_floor_is_kept() -> None:
    assert full_jitter(1, base=2, cap=300, floor=5, uniform=_bottom) == 5


def test_given_a_fractional_floor_when_the_draw_is_below_it_then_the_floor_is_rounded_up() -> None:
    assert full_jitter(1, base=2, cap=300, floor=1.2, uniform=_bottom) == 2


def test_given_a_negative_floor_when_the_draw_is_zero_then_the_delay_is_zero() -> None:
    assert full_jitter(1, base=2, cap=300, floor=-10, uniform=_bottom) == 0


@pytest.mark.parametrize("attempt", [65, 1_100, 10**6, 10**18])
def test_given_a_huge_attempt_when_computing_then_nothing_overflows_and_the_cap_applies(attempt: int) -> None:
    assert ceiling(attempt, base=2, cap=300) == 300
    assert full_jitter(attempt, base=2, cap=300, uniform=_top) == 300


def test_given_a_cap_beyond_twelve_hours_when_computing_then_the_delay_is_at_most_twelve_hours() -> None:
    assert full_jitter(40, base=60, cap=10**9, uniform=_top) == MAX_VISIBILITY_SECONDS


def test_given_a_floor_beyond_twelve_hours_when_computing_then_the_delay_is_at_most_twelve_hours() -> None:
    assert full_jitter(1, base=2, cap=300, floor=100_000, uniform=_bottom) == MAX_VISIBILITY_SECONDS


@pytest.mark.parametrize("attempt", [0, -1, -100])
def test_given_an_attempt_below_one_when_computing_then_it_is_rejected(attempt: int) -> None:
    with pytest.raises(ValueError, match="1-based"):
        full_jitter(attempt, base=2, cap=300)


@pytest.mark.parametrize("seconds", [0, 1, 30, MAX_VISIBILITY_SECONDS])
def test_given_seconds_within_twelve_hours_when_raising_retry_after_then_they_are_kept(seconds: int) -> None:
    error = RetryAfter(seconds)

    assert error.seconds == seconds
    assert isinstance(error, TransientError)


@pytest.mark.parametrize("seconds", [-1, MAX_VISIBILITY_SECONDS + 1])
def test_given_seconds_outside_twelve_hours_when_raising_retry_after_then_it_is_rejected(
    seconds: int,
) -> None:
    with pytest.raises(ValueError, match="RetryAfter seconds"):
        RetryAfter(seconds)


def test_given_a_reason_when_raising_retry_after_then_the_message_is_the_reason() -> None:
    assert str(RetryAfter(30, "429 from payments")) == "429 from payments"
    assert str(RetryAfter(30)) == "retry after 30s"
