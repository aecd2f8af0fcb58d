"""Two redriver runs against one DLQ at once (in-process SQS and DynamoDB, moto), Given / When / Then:
with the run lease the DLQ drains at one run's velocity, whatever the overlap.

The runs are threads taking turns in virtual time (:class:`Simulation`): a run goes on until it sleeps
(its pacing wait), then the run due earliest goes on, the clock jumping to its due time. So two runs
overlap as they would in two Lambda environments, their pacing is exact, and nothing really sleeps.
Without the lease the same overlap doubles the velocity: the control shows the test would see it.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import pytest
from moto import mock_aws

from sluice.logevents import LogEvent
from sluice.redrive.breaker import Breaker
from sluice.redrive.lease import LEASE_SECONDS, MAX_STRETCH_SECONDS, SKEW_MARGIN_SECONDS, HeldLease, RunLease
from sluice.redrive.runner import Redriver, RedriveReport
from sluice.redrive.settings import RedriveSettings
from tests.conftest import TEST_SEAL
from tests.doubles import RecordingMetrics

from .test_redriver import Stack

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

MESSAGES = 40
T0 = 1_795_860_000.0
"""The runs' wall clock (the lease's) at virtual time 0."""


class Simulation:
    """Runs tasks on threads one at a time in virtual time: a task runs until it sleeps or ends, then the
    task due earliest goes on (the clock jumps to its due time)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._lock = threading.Lock()
        self._due: list[tuple[float, int, threading.Event]] = []
        self._order = itertools.count()

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        turn = threading.Event()
        with self._lock:
            heapq.heappush(self._due, (self.now + max(0.0, seconds), next(self._order), turn))
            self._next()
        turn.wait()

    def _next(self) -> None:  # with the lock held
        if self._due:
            at, _, turn = heapq.heappop(self._due)
            self.now = max(self.now, at)
            turn.set()

    def run(self, tasks: list[tuple[float, Callable[[], RedriveReport]]]) -> list[RedriveReport]:
        """Each task starts at its virtual time; returns their reports in order."""
        reports: list[RedriveReport | BaseException] = [RuntimeError("never ended")] * len(tasks)

        def body(index: int, turn: threading.Event, task: Callable[[], RedriveReport]) -> None:
            turn.wait()
            try:
                reports[index] = task()
            except BaseException as exc:  # noqa: BLE001 - handed to the test below
                reports[index] = exc
            finally:
                with self._lock:
                    self._next()

        threads = []
        with self._lock:
            for index, (at, task) in enumerate(tasks):
                turn = threading.Event()
                heapq.heappush(self._due, (at, next(self._order), turn))
                threads.append(threading.Thread(target=body, args=(index, turn, task), daemon=True))
            for thread in threads:
                thread.start()
            self._next()
        for thread in threads:
            thread.join(timeout=60)  # a bound for a broken test only: each turn takes milliseconds
            assert not thread.is_alive(), "a run never ended"
        for report in reports:
            if isinstance(report, BaseException):
                raise report
        return cast("list[RedriveReport]", reports)


class Run:
    """One redriver run (its own metrics and lease token) on the shared stack, in the simulation."""

    def __init__(
        self, stack: Stack, sim: Simulation, *, rate: float, lease: bool = True, skew: float = 0.0
    ) -> None:
        self.metrics = RecordingMetrics()
        self.received_at: list[float] = []
        """The virtual time of each message this run received."""
        self._sim = sim
        settings = RedriveSettings.from_env(stack.env(redrive_max_per_second=rate))
        clock = lambda: T0 + sim.now + skew  # noqa: E731 - this run's wall clock, `skew` off the others'
        self.redriver = Redriver(
            settings=settings,
            sqs=cast("SQSClient", _Receives(stack.sqs, self)),
            breaker=Breaker.from_settings(settings, stack.ddb),
            lease=RunLease(stack.ddb, "breaker", name=settings.breaker_name, clock=clock) if lease else None,
            logger=stack.logger,
            metrics_sink=self.metrics,
            seal=TEST_SEAL,
            monotonic=sim.monotonic,
            sleep=sim.sleep,
        )

    def task(self, holder: str) -> Callable[[], RedriveReport]:
        return lambda: self.redriver.run(holder=holder)


class _Receives:
    """The run's SQS client: records the virtual time of every message received."""

    def __init__(self, client: Any, run: Run) -> None:
        self._client = client
        self._run = run

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def receive_message(self, **kwargs: Any) -> Any:
        response = self._client.receive_message(**kwargs)
        self._run.received_at += [self._run._sim.now] * len(response.get("Messages", []))
        return response


def worst_excess(times: list[float], rate: float, burst: int = 10) -> float:
    """max over any window [t_i, t_j] of (messages received - rate·(t_j - t_i) - burst): ≤ 0 is within."""
    t = sorted(times)
    return max(j - i + 1 - rate * (t[j] - t[i]) - burst for i in range(len(t)) for j in range(i, len(t)))


@pytest.fixture
def stack() -> Iterator[Stack]:
    with mock_aws():
        yield Stack()


def lease_item(stack: Stack) -> dict[str, Any]:
    return stack.ddb.get_item(TableName="breaker", Key={"id": {"S": "redrive#lease"}}).get("Item", {})


def test_given_a_run_draining_when_a_second_run_starts_then_it_ends_at_once_and_the_velocity_is_one_runs(
    stack,
) -> None:
    # Given 40 dead letters and a run re-driving them at 10/s
    stack.dead_letter(MESSAGES)
    sim = Simulation()
    first, second = Run(stack, sim, rate=10), Run(stack, sim, rate=10)
    # When a second run (the backstop, say) starts half a second later, while the first one paces
    first_report, second_report = sim.run([(0.0, first.task("alarm run")), (0.5, second.task("backstop"))])
    # Then the second run ends at once, touching nothing, and counts itself skipped
    assert (second_report.stopped, second_report.received, second.received_at) == ("another_run", 0, [])
    assert second_report.other_run is not None
    assert second_report.other_run["holder"] == "alarm run"
    assert second.metrics.values["RedriveRunsSkipped"] == 1
    assert LogEvent.RUN_SKIPPED in stack.log.getvalue()
    # And the first run drains the DLQ alone, at most 10/s plus one batch in any window
    assert (first_report.stopped, first_report.redriven) == ("drained", MESSAGES)
    assert worst_excess(first.received_at, 10) <= 0
    assert stack.counts(stack.dlq_url)["visible"] == 0
    # And the lease is free again for the next run
    assert "owner" not in lease_item(stack)


def test_given_no_lease_when_two_runs_overlap_then_the_dlq_drains_at_twice_the_velocity(stack) -> None:
    # The control: the same overlap with Redrivers built without a lease
    stack.dead_letter(MESSAGES)
    sim = Simulation()
    first, second = Run(stack, sim, rate=10, lease=False), Run(stack, sim, rate=10, lease=False)
    sim.run([(0.0, first.task("alarm run")), (0.5, second.task("backstop"))])
    # Then both re-drive, and together they exceed one run's bound
    assert first.received_at
    assert second.received_at
    assert worst_excess(first.received_at + second.received_at, 10) > 0


def test_given_a_second_run_with_a_clock_far_ahead_then_the_first_stops_at_its_next_renewal(stack) -> None:
    # Given a run draining 40 dead letters at 1/s (40 s), and an operator's run whose clock is 5 minutes
    # ahead: the first run's lease looks long expired to it
    stack.dead_letter(MESSAGES)
    sim = Simulation()
    first, operator = Run(stack, sim, rate=1), Run(stack, sim, rate=1, skew=300)
    # When the operator's run starts a second into the first
    first_report, operator_report = sim.run([(0.0, first.task("lambda")), (1.0, operator.task("laptop"))])
    # Then it takes the lease over (the failure mode the margin guards against), and the first run
    # stops at its next renewal, half a lease later: the overlap lasts one renewal interval, no more
    assert first_report.stopped == "lease_lost"
    assert LogEvent.LEASE_LOST in stack.log.getvalue()
    assert max(first.received_at) <= 1.0 + LEASE_SECONDS / 2 + 1
    assert operator_report.stopped == "drained"
    # And nothing is lost: every message was re-driven by one run or the other
    assert first_report.redriven + operator_report.redriven == MESSAGES
    assert stack.counts(stack.dlq_url)["visible"] == 0


def test_given_a_second_run_with_a_clock_ahead_within_the_margin_then_it_is_refused(stack) -> None:
    # Given a run draining at 5/s, and a second run whose clock is just under the margin ahead
    stack.dead_letter(MESSAGES)
    sim = Simulation()
    first, second = Run(stack, sim, rate=5), Run(stack, sim, rate=5, skew=SKEW_MARGIN_SECONDS - 1)
    # When the second starts a second in, Then it is refused, and the first drains alone at its pace
    first_report, second_report = sim.run([(0.0, first.task("lambda")), (1.0, second.task("laptop"))])
    assert (first_report.stopped, second_report.stopped) == ("drained", "another_run")
    assert worst_excess(first.received_at, 5, burst=5) <= 0


def test_given_a_run_that_crashed_holding_the_lease_then_the_next_run_takes_it_after_its_expiry(
    stack,
) -> None:
    # Given a run that took the lease at T0 and crashed (never renewed nor released)
    stack.dead_letter(5)
    crashed = RunLease(stack.ddb, "breaker", clock=lambda: T0).acquire("crashed run")
    assert isinstance(crashed, HeldLease)
    assert crashed.expires is not None
    sim = Simulation()
    # When the next run comes before its expiry plus the clock margin, it ends at once
    early = Run(stack, sim, rate=10, skew=LEASE_SECONDS + SKEW_MARGIN_SECONDS - 1)
    assert sim.run([(0.0, early.task("backstop 1"))])[0].stopped == "another_run"
    # When one comes after it, it takes the lease over and drains the DLQ
    late = Run(stack, sim, rate=10, skew=LEASE_SECONDS + SKEW_MARGIN_SECONDS + 1)
    [report] = sim.run([(0.0, late.task("backstop 2"))])
    assert (report.stopped, report.redriven) == ("drained", 5)


def test_given_a_slow_velocity_when_a_run_waits_long_between_batches_then_its_lease_stays_live_and_plausible(
    stack,
) -> None:
    # Given 3 dead letters re-driven at one per 100 s: each pacing wait is longer than a renewal covers
    stack.dead_letter(3)
    sim = Simulation()
    first, second = Run(stack, sim, rate=0.01), Run(stack, sim, rate=0.01)
    expiries: list[float] = []
    real_update = stack.ddb.update_item

    def recording_update(**kwargs: Any) -> Any:
        values = kwargs.get("ExpressionAttributeValues", {})
        if "renewed_at" in kwargs.get("UpdateExpression", "") and ":expires" in values:
            expiries.append(float(values[":expires"]["N"]) - float(values[":now"]["N"]))
        return real_update(**kwargs)

    stack.ddb.update_item = recording_update
    # When a second run starts deep inside the first one's first 100 s wait (and again in the second)
    reports = sim.run(
        [(0.0, first.task("slow run")), (80.0, second.task("backstop")), (170.0, second.task("backstop 2"))]
    )
    # Then it is refused both times: the wait was slept in pieces, the lease kept before each
    assert [r.stopped for r in reports] == ["drained", "another_run", "another_run"]
    assert reports[0].redriven == 3
    # And no take or renewal wrote an expiry further ahead than a holder may (a taker would steal it)
    assert expiries
    assert max(expiries) <= MAX_STRETCH_SECONDS + LEASE_SECONDS
