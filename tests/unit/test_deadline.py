"""The consumer starts a record only while the invocation has time left for it (sluice.consumer.deadline)."""

from __future__ import annotations

import pytest

from sluice.consumer.deadline import MIN_MARGIN_SECONDS, Deadline


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_given_no_context_then_every_record_is_started() -> None:
    assert Deadline(None).allows_another()


@pytest.mark.parametrize(("left_ms", "allowed"), [(1001, True), (1000, False), (200, False)])
def test_given_no_record_yet_then_the_margin_is_the_minimum(left_ms: int, allowed: bool) -> None:
    deadline = Deadline(lambda: left_ms)

    assert deadline.margin() == MIN_MARGIN_SECONDS
    assert deadline.allows_another() is allowed


def test_given_a_slow_record_then_the_margin_is_twice_the_longest_so_far() -> None:
    # Given an invocation with 7 s left, and records that took 0.5 s then 3 s
    clock, left = Clock(), [7000]
    deadline = Deadline(lambda: left[0], clock=clock)

    def takes(seconds: float) -> None:
        clock.now += seconds

    deadline.timed(lambda: takes(0.5))
    assert deadline.margin() == MIN_MARGIN_SECONDS
    deadline.timed(lambda: takes(3.0))

    # Then the margin is 6 s: with 7 s left one more starts, with 6 s it does not
    assert deadline.margin() == 6.0
    assert deadline.allows_another()
    left[0] = 6000
    assert not deadline.allows_another()


def test_a_record_that_raises_is_timed_too() -> None:
    clock = Clock()
    deadline = Deadline(lambda: 10_000, clock=clock)

    def fails() -> None:
        clock.now += 4.0
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        deadline.timed(fails)
    assert deadline.margin() == 8.0
