"""What a scenario is, and the runner that drives scenarios against a stack, all at once.

A scenario sends its messages (ids unique per run, so scenarios can share one stack and run
concurrently), then is observed until it settles as expected, can no longer, or times out; it is
judged only from the outside (see :mod:`sluice_local.app.observer`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sluice_local.app.messages import ORDERS
from sluice_local.app.observer import Stack
from sluice_local.app.principals import PRODUCER

MAX_STRETCH = 3.0
"""A scenario still making progress may run to this many times its ``timeout``, never longer."""


@dataclass
class Outcome:
    name: str
    expected: str
    observed: str
    ok: bool
    seconds: float = 0.0
    skipped: bool = False
    """Not run (e.g. no PostgreSQL for the job scenarios); ``observed`` says why. Never a pass."""
    started_at: datetime | None = None
    """When the scenario started (the demo report's timeline)."""


class Scenario:
    name = "scenario"
    expected = ""
    timeout = 60.0
    """Seconds the scenario may take before it is judged as it stands (see ``patience``)."""
    patience = 0.0
    """Seconds of grace past ``timeout`` while the scenario still moves: whenever ``observe`` changes
    ``progress``, the deadline becomes at least that moment plus ``patience`` (never beyond
    ``MAX_STRETCH`` times ``timeout``). A loaded machine moves slower, not differently: a scenario
    that keeps making progress is not cut off by a figure chosen on an idle one. 0: a fixed deadline."""

    def __init__(self) -> None:
        self.run_id = uuid.uuid4().hex[:8]
        self.prefix = f"{self.name}-{self.run_id}-"
        self.started = 0.0
        self.started_at = datetime.now(UTC)
        self.failed = False
        """Set by ``observe`` when the outcome can no longer be as expected: stop waiting."""
        self.progress: object = None
        """What ``observe`` has seen move so far (e.g. counts); a change extends the deadline."""

    def start(self, stack: Stack) -> None:
        raise NotImplementedError

    def observe(self, stack: Stack) -> tuple[bool, str]:
        """(settled and as expected, what is seen now)."""
        raise NotImplementedError

    def finish(self, stack: Stack) -> None:
        """Called once the scenario has settled or timed out (undo what must not outlive it)."""

    def redrive_broken(self, stack: Stack) -> str:
        """Failed redrive executions since this scenario started (stepfunctions mode), as text; marks the
        scenario failed, since its messages may never move."""
        failures = stack.redrive_failures(self.started_at)
        if not failures:
            return ""
        self.failed = True
        more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        return f"; redrive execution FAILED: {failures[0]}{more}"

    def send(self, stack: Stack, body: Any, *, workload: str = ORDERS, **kwargs: Any) -> str:
        """Send ``body`` to the queue of ``workload`` (the orders example's unless named)."""
        text = body if isinstance(body, str) else json.dumps(body)
        response = stack.client("sqs", PRODUCER).send_message(
            QueueUrl=stack.outputs[f"{workload}QueueUrl"], MessageBody=text, **kwargs
        )
        return str(response["MessageId"])


def run(
    stack: Stack,
    scenarios: Iterable[Scenario],
    *,
    on_tick: Callable[[list[Outcome | None]], None] | None = None,
    poll: float = 0.5,
) -> list[Outcome]:
    """Start every scenario, then observe until each settles as expected or times out."""
    todo = list(scenarios)
    results: list[Outcome | None] = [None] * len(todo)
    deadlines: list[float] = []
    for scenario in todo:
        scenario.started = time.monotonic()
        scenario.started_at = datetime.now(UTC)
        deadlines.append(scenario.timeout)
        scenario.start(stack)
    moved: list[object] = [scenario.progress for scenario in todo]
    while any(r is None for r in results):
        for i, scenario in enumerate(todo):
            if results[i] is not None:
                continue
            ok, seen = scenario.observe(stack)
            elapsed = time.monotonic() - scenario.started
            if scenario.patience > 0 and scenario.progress != moved[i]:
                moved[i] = scenario.progress
                stretched = max(deadlines[i], elapsed + scenario.patience)
                deadlines[i] = min(stretched, MAX_STRETCH * scenario.timeout)
            if ok or scenario.failed or elapsed > deadlines[i]:
                results[i] = Outcome(
                    scenario.name,
                    scenario.expected,
                    seen,
                    ok,
                    round(elapsed, 1),
                    started_at=scenario.started_at,
                )
                scenario.finish(stack)
        if on_tick:
            on_tick(results)
        if any(r is None for r in results):
            time.sleep(poll)
    return [r for r in results if r is not None]
