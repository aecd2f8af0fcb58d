"""The consumer starts a record only while the invocation has time left for it (sluice.consumer.deadline),
and a deferral never sends a record to the dead-letter queue."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.consumer.deadline import MIN_MARGIN_SECONDS, Deadline
from tests.clocks import Clock

MAX_RECEIVES = 5


class Record:
    """What the deadline reads of a Powertools SQSRecord: its raw event's attributes."""

    def __init__(self, receives: object = "1") -> None:
        self.raw_event: dict[str, Any] = {"attributes": {"ApproximateReceiveCount": receives}}


def started_once(deadline: Deadline) -> Deadline:
    assert deadline.missed(Record()) is None  # the invocation's first record: always started
    return deadline


def test_given_no_context_then_every_record_is_started() -> None:
    deadline = Deadline(None, max_receive_count=MAX_RECEIVES)

    assert [deadline.missed(Record()) for _ in range(3)] == [None, None, None]


def test_given_no_time_left_then_the_first_record_still_starts_and_the_next_does_not() -> None:
    # A function whose timeout is shorter than the margin still processes one record a batch
    deadline = Deadline(lambda: 0, max_receive_count=MAX_RECEIVES)

    assert deadline.missed(Record()) is None
    assert deadline.missed(Record()) == MIN_MARGIN_SECONDS


@pytest.mark.parametrize(("left_ms", "started"), [(1001, True), (1000, False), (200, False)])
def test_given_no_record_timed_yet_then_the_margin_is_the_minimum(left_ms: int, started: bool) -> None:
    deadline = started_once(Deadline(lambda: left_ms, max_receive_count=MAX_RECEIVES))

    assert (deadline.missed(Record()) is None) is started


@pytest.mark.parametrize("receives", ["4", "5", "9", None, "not a number"])
def test_given_one_of_its_last_two_receives_then_a_record_is_started_however_little_time_is_left(
    receives: object,
) -> None:
    # A deferral costs a receive: on its last two (or when SQS did not say) it goes through the consumer
    deadline = started_once(Deadline(lambda: 0, max_receive_count=MAX_RECEIVES))

    assert deadline.missed(Record(receives)) is None


def test_given_a_slow_record_then_the_margin_is_twice_the_longest_so_far() -> None:
    # Given an invocation with 7 s left, and records that took 0.5 s then 3 s
    clock, left = Clock(), [7000]
    deadline = started_once(Deadline(lambda: left[0], max_receive_count=MAX_RECEIVES, clock=clock))

    def takes(seconds: float) -> None:
        clock.now += seconds

    deadline.timed(lambda: takes(0.5))
    deadline.timed(lambda: takes(3.0))

    # Then the margin is 6 s: with 7 s left one more starts, with 6 s it does not
    assert deadline.missed(Record()) is None
    left[0] = 6000
    assert deadline.missed(Record()) == 6.0


def test_a_record_that_raises_is_timed_too() -> None:
    clock = Clock()
    deadline = started_once(Deadline(lambda: 8000, max_receive_count=MAX_RECEIVES, clock=clock))

    def fails() -> None:
        clock.now += 4.0
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        deadline.timed(fails)
    assert deadline.missed(Record()) == 8.0
