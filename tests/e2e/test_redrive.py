"""DLQ redrive through the deployed template, in both RedriveModes: lambda (the redriver) and
stepfunctions (the redrive state machine), each started by the DLQ alarm's EventBridge state change and a
backstop schedule.

Per mode, keeps-failing and recovers-after-redrive share the stack and run at once (one module-scoped
run, one test each for its verdict); velocity (it times every redrive) and breaker-open (it stops every
redrive of the stack) each run alone, after them. Everything is observed from outside (see
sluice_local.app.observer): queues, the example processor's ledger table, the redriver's log lines
(lambda) or the state machine's execution history (stepfunctions).
"""

from __future__ import annotations

import pytest

from sluice_local.app import observer
from sluice_local.app.fast import FAST
from sluice_local.demo.scenarios import redrive, runner

PARAMS = redrive.RedriveParams.of(FAST)
MODES = ["lambda", "stepfunctions"]


@pytest.fixture(scope="module", params=MODES)
def redrive_stack(request: pytest.FixtureRequest) -> observer.Stack:
    stack: observer.Stack = request.getfixturevalue("stack" if request.param == "lambda" else "sfn_stack")
    assert stack.redrive_mode == request.param, f"the {request.param} stack reports {stack.redrive_mode}"
    return stack


@pytest.fixture(scope="module")
def concurrent(redrive_stack: observer.Stack) -> dict[str, tuple[runner.Scenario, runner.Outcome]]:
    """keeps-failing and recovers-after-redrive, run at once on the mode's stack."""
    todo = redrive.redrive_scenarios(FAST)
    outcomes = runner.run(redrive_stack, todo)
    return {s.name: (s, o) for s, o in zip(todo, outcomes, strict=True)}


def show(capsys: pytest.CaptureFixture[str], stack: observer.Stack, outcome: runner.Outcome) -> None:
    with capsys.disabled():  # the measured figures belong in the test output
        print(f"\n  [{stack.redrive_mode}] {outcome.name} ({outcome.seconds:.1f} s): {outcome.observed}")


def test_given_a_lost_payload_when_redrives_keep_failing_then_backoff_grows_and_it_is_isolated_intact(
    redrive_stack, concurrent, capsys
):
    scenario, outcome = concurrent["keeps-failing"]
    show(capsys, redrive_stack, outcome)
    assert isinstance(scenario, redrive.KeepsFailing)
    seen = f"observed: {outcome.observed}"
    attempts = [d.attempt for d in scenario.redrives]
    assert attempts == list(range(1, PARAMS.max_attempts + 1)), f"redrive attempts {attempts}; {seen}"
    for d in scenario.redrives:
        assert PARAMS.allows(d.attempt, d.delay_seconds), (
            f"attempt {d.attempt}: delay {d.delay_seconds}s outside uniform({PARAMS.floor:g}, "
            f"{PARAMS.top(d.attempt):g}) rounded up; {seen}"
        )
    assert scenario.envelope is not None, f"never reached PoisonPillQueue; {seen}"
    assert not scenario.problems, "; ".join(scenario.problems) + f"; {seen}"
    assert outcome.ok, f"expected {outcome.expected}; {seen}"


def test_given_downstream_recovers_when_the_message_is_redriven_then_it_is_charged_once_never_isolated(
    redrive_stack, concurrent, capsys
):
    scenario, outcome = concurrent["recovers-after-redrive"]
    show(capsys, redrive_stack, outcome)
    assert isinstance(scenario, redrive.RecoversAfterRedrive)
    assert scenario.uploaded, f"the consumer never dead-lettered the message; observed: {outcome.observed}"
    assert outcome.ok, f"expected {outcome.expected}; observed: {outcome.observed}"


def test_given_a_full_dlq_when_it_is_redriven_then_at_most_r_per_second_plus_a_batch_move_each_once(
    redrive_stack, capsys
):
    scenario = redrive.Velocity(PARAMS)
    [outcome] = runner.run(redrive_stack, [scenario])  # alone: every redrive of the stack is timed
    show(capsys, redrive_stack, outcome)
    f = scenario.figures
    n, at, bound = f.tightest
    assert f.excess <= 0, (
        f"{n} re-driven by t={at:.2f} s after the first, above R·(t+{scenario.slack:g})+{scenario.burst} "
        f"= {bound:g} (R = {scenario.rate:g}/s); observed: {outcome.observed}"
    )
    assert f.count == scenario.count, f"{f.count} of {scenario.count} re-driven; observed: {outcome.observed}"
    assert outcome.ok, f"expected {outcome.expected}; observed: {outcome.observed}"


def test_given_the_breaker_is_open_when_messages_wait_in_the_dlq_then_nothing_moves_until_it_closes(
    redrive_stack, capsys
):
    scenario = redrive.BreakerHolds(PARAMS)
    [outcome] = runner.run(redrive_stack, [scenario])  # alone: it blocks every redrive of the stack
    show(capsys, redrive_stack, outcome)
    assert scenario.phase != "opening", f"no redrive run was ever blocked; observed: {outcome.observed}"
    blocked = (
        "executions FAILED with CircuitBreakerOpen"
        if redrive_stack.redrive_mode == "stepfunctions"
        else "redriver runs stopped: breaker_open"
    )
    assert scenario.blocked >= scenario.cycles, (
        f"{scenario.blocked} {blocked} while held, expected ≥ {scenario.cycles}; observed: {outcome.observed}"
    )
    assert outcome.ok, f"expected {outcome.expected}; observed: {outcome.observed}"
