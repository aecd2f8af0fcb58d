"""Redrive planning: full-jitter bounds, cap, floor, poison threshold, routing beyond the threshold."""

from __future__ import annotations

import math
import random

import pytest

from sluice.errors import PermanentError
from sluice.redrive import MAX_BACKOFF_SECONDS, plan, source_queue

SOURCE = "arn:aws:sqs:us-east-1:123456789012:work"


def _lowest(a: float, b: float) -> float:
    return a


def _highest(a: float, b: float) -> float:
    return b


@pytest.mark.parametrize("attempts_so_far", range(0, 5))
def test_given_attempts_below_the_maximum_when_planned_then_the_delay_is_within_full_jitter_bounds(
    attempts_so_far: int,
) -> None:
    rng = random.Random(attempts_so_far)
    attempt = attempts_so_far + 1
    top = min(3600.0, 10 * 2**attempt)
    for _ in range(500):
        p = plan(attempts_so_far, max_attempts=5, base=10, cap=3600, floor=5, uniform=rng.uniform)
        assert p.attempt == attempt
        assert not p.poison
        assert 5 <= p.delay_seconds <= math.ceil(top)


def test_given_a_large_attempt_when_planned_then_the_cap_bounds_the_delay() -> None:
    p = plan(40, max_attempts=100, base=10, cap=600, uniform=_highest)
    assert p.delay_seconds == 600


def test_given_the_lowest_draw_when_planned_then_the_floor_holds() -> None:
    assert plan(0, max_attempts=5, base=10, cap=600, floor=30, uniform=_lowest).delay_seconds == 30


def test_given_a_floor_above_the_exponential_term_when_planned_then_the_floor_wins() -> None:
    # base * 2^1 = 2 < floor 30: the window collapses to the floor
    assert plan(0, max_attempts=5, base=1, cap=600, floor=30, uniform=_highest).delay_seconds == 30


@pytest.mark.parametrize(("attempts_so_far", "poison"), [(3, False), (4, False), (5, True), (9, True)])
def test_given_the_attempt_count_when_planned_then_poison_starts_after_the_maximum(
    attempts_so_far: int, poison: bool
) -> None:
    p = plan(attempts_so_far, max_attempts=5, base=10, cap=600, uniform=_highest)
    assert p.poison is poison
    assert p.attempt == attempts_so_far + 1
    if poison:
        assert p.delay_seconds == 0
        assert not p.via_delay_pipeline


@pytest.mark.parametrize(("delay", "via_delay"), [(899, False), (900, False), (901, True), (86_400, True)])
def test_given_a_delay_beyond_the_direct_send_threshold_when_planned_then_it_goes_through_the_delay_pipeline(
    delay: int, via_delay: bool
) -> None:
    p = plan(0, max_attempts=5, base=delay, cap=delay, floor=delay, uniform=_highest)
    assert p.delay_seconds == delay
    assert p.via_delay_pipeline is via_delay


def test_given_a_smaller_threshold_when_planned_then_routing_follows_it() -> None:
    p = plan(0, max_attempts=5, base=10, cap=10, floor=10, direct_send_threshold=6, uniform=_highest)
    assert p.via_delay_pipeline


def test_given_an_enormous_cap_when_planned_then_the_delay_stays_within_a_year() -> None:
    p = plan(60, max_attempts=100, base=1e9, cap=1e12, uniform=_highest)
    assert p.delay_seconds == MAX_BACKOFF_SECONDS


@pytest.mark.parametrize(
    "kwargs",
    [
        {"attempts_so_far": -1},
        {"max_attempts": 0},
        {"floor": 700},
        {"direct_send_threshold": 901},
    ],
)
def test_given_invalid_inputs_when_planned_then_value_error(kwargs: dict) -> None:
    args = {"attempts_so_far": 0, "max_attempts": 5, "base": 10, "cap": 600, **kwargs}
    attempts = args.pop("attempts_so_far")
    with pytest.raises(ValueError):  # noqa: PT011 - each case names its own problem
        plan(attempts, **args)


def test_given_the_dlq_source_attribute_when_resolving_then_it_wins_over_the_default() -> None:
    other = "arn:aws:sqs:us-east-1:123456789012:other"
    assert (
        source_queue({"DeadLetterQueueSourceArn": other}, default=SOURCE, allowlist=[SOURCE, other]) == other
    )


def test_given_no_source_attribute_when_resolving_then_the_default_is_used() -> None:
    assert source_queue({}, default=SOURCE, allowlist=[SOURCE]) == SOURCE


def test_given_a_source_outside_the_allowlist_when_resolving_then_permanent_error() -> None:
    with pytest.raises(PermanentError, match="not in the redrive allowlist"):
        source_queue(
            {"DeadLetterQueueSourceArn": "arn:aws:sqs:us-east-1:999999999999:evil"},
            default=None,
            allowlist=[SOURCE],
        )


def test_given_no_source_at_all_when_resolving_then_permanent_error() -> None:
    with pytest.raises(PermanentError, match="no source queue"):
        source_queue(None, default=None, allowlist=[SOURCE])
