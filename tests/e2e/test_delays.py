"""Long delays through the deployed template: delay queue → batch-delay → S3 / state machine → target."""

from __future__ import annotations

import pytest

from sluice_local import scenarios
from sluice_local.__main__ import FAST

THRESHOLD = float(FAST["DirectSendThresholdSeconds"])


@pytest.mark.parametrize(
    "make",
    [
        lambda: scenarios.Delayed("delay-direct", THRESHOLD / 2, route="direct send"),
        lambda: scenarios.Delayed("delay-parked", THRESHOLD * 2 + 2, route="parked, state machine"),
        scenarios.SweptBucket,
    ],
    ids=["due-before-threshold", "due-well-after-threshold", "failed-bucket-swept"],
)
def test_delayed_messages_arrive_on_time(stack, capsys, make):
    scenario = make()
    [outcome] = scenarios.run(stack, [scenario])
    with capsys.disabled():  # the measured lag belongs in the test output
        print(f"\n  {outcome.name}: {outcome.observed}")
    assert outcome.ok, f"{outcome.name}: expected {outcome.expected}; observed {outcome.observed}"
