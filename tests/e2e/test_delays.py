"""Long delays through the deployed template: delay queue → batch-delay → S3 / state machine → target."""

from __future__ import annotations

import pytest

from sluice_local.app.fast import FAST
from sluice_local.demo.scenarios import delay, runner

THRESHOLD = float(FAST["DirectSendThresholdSeconds"])


@pytest.mark.parametrize(
    "make",
    [
        lambda: delay.Delayed("delay-direct", THRESHOLD / 2, route="direct send"),
        lambda: delay.Delayed("delay-parked", THRESHOLD * 2 + 2, route="parked, state machine"),
        delay.SweptBucket,
    ],
    ids=["due-before-threshold", "due-well-after-threshold", "failed-bucket-swept"],
)
def test_delayed_messages_arrive_on_time(stack, capsys, make):
    scenario = make()
    [outcome] = runner.run(stack, [scenario])
    with capsys.disabled():  # the measured lag belongs in the test output
        print(f"\n  {outcome.name}: {outcome.observed}")
    assert outcome.ok, f"{outcome.name}: expected {outcome.expected}; observed {outcome.observed}"
