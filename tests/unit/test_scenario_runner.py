"""The scenario runner's deadline: fixed by default, stretched while a scenario still makes progress.

Time is a fake clock that only the runner's own polling sleeps move, so nothing here waits.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from sluice_local.demo.scenarios import runner


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Creeping(runner.Scenario):
    """Moves one step every ``every`` seconds until ``steps`` are done (a slow, loaded machine)."""

    name = "creeping"
    timeout = 10.0

    def __init__(self, clock: Clock, *, steps: int, every: float, patience: float = 0.0) -> None:
        super().__init__()
        self.clock = clock
        self.steps = steps
        self.every = every
        self.patience = patience

    def start(self, stack: Any) -> None:
        pass

    def observe(self, stack: Any) -> tuple[bool, str]:
        done = min(self.steps, int((self.clock.now - self.started) / self.every))
        self.progress = done
        return done == self.steps, f"{done} of {self.steps}"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    only_the_runners = SimpleNamespace(monotonic=fake.monotonic, sleep=fake.sleep)
    monkeypatch.setattr(f"{runner.__name__}.time", only_the_runners)
    return fake


def test_given_no_patience_when_a_scenario_is_slow_then_it_is_judged_at_its_timeout(clock: Clock) -> None:
    scenario = Creeping(clock, steps=10, every=2.0)
    [outcome] = runner.run(None, [scenario], poll=0.5)  # type: ignore[arg-type]
    assert not outcome.ok
    assert 10.0 < outcome.seconds <= 10.5
    assert outcome.observed == "5 of 10"


def test_given_patience_when_a_scenario_keeps_moving_then_it_may_finish_past_its_timeout(
    clock: Clock,
) -> None:
    scenario = Creeping(clock, steps=10, every=2.0, patience=3.0)
    [outcome] = runner.run(None, [scenario], poll=0.5)  # type: ignore[arg-type]
    assert outcome.ok, outcome.observed
    assert 20.0 <= outcome.seconds <= 20.5


def test_given_patience_when_a_scenario_stalls_then_it_is_judged_patience_after_its_last_step(
    clock: Clock,
) -> None:
    scenario = Creeping(clock, steps=10, every=5.0, patience=3.0)  # a step takes longer than the patience
    [outcome] = runner.run(None, [scenario], poll=0.5)  # type: ignore[arg-type]
    assert not outcome.ok
    assert outcome.observed == "2 of 10"
    assert 13.0 < outcome.seconds <= 13.5  # step 2 at t=10, then 3 s of nothing


def test_given_patience_when_a_scenario_creeps_forever_then_it_stops_at_the_stretch_cap(clock: Clock) -> None:
    scenario = Creeping(clock, steps=1000, every=1.0, patience=5.0)
    [outcome] = runner.run(None, [scenario], poll=0.5)  # type: ignore[arg-type]
    assert not outcome.ok
    cap = runner.MAX_STRETCH * scenario.timeout
    assert cap < outcome.seconds <= cap + 0.5
