"""The metric-math alarms of template.yaml, evaluated on traffic shapes (sluice_local.emulation.metric_math).

moto and the local runtime never evaluate an alarm built from an expression, so these run the template's
own expressions, thresholds and evaluation periods (with the parameters' defaults) on series a person
can check by hand: steady traffic, losses, a ramp, redeliveries, a backlog, the breaker. The template is
a copy of the project that runs the example Orders whatever a fork lists (every workload's alarms come
from one loop body: the tests read the example's), and a fork's own workloads beside it.
"""

from __future__ import annotations

import atexit
import functools
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from sluice_local.emulation.metric_math import MetricMathError, alarm_state, evaluate
from tests.unit.test_template import load_template, project_with_examples, workload_names
from tests.unit.test_template_operations import resolved

DEFAULTS = {"RedriveMode": "stepfunctions"}  # the redrive state machine's alarm exists in this mode


@functools.cache
def _template() -> tuple[dict[str, Any], dict[str, str]]:
    """The resolved template and the parameters' defaults (read once: it is slow to resolve)."""
    raw = load_template()
    defaults = {k: str(v.get("Default")) for k, v in raw["Parameters"].items() if "Default" in v}
    into = Path(tempfile.mkdtemp(prefix="sluice-metric-math-")) / "project"  # links and two small files
    atexit.register(shutil.rmtree, into.parent, True)
    return resolved(DEFAULTS, project_with_examples(into)), defaults


def alarm(logical_id: str) -> dict[str, Any]:
    """The alarm's properties with the parameters' defaults put in (Ref, Sub), as CloudFormation would."""
    template, defaults = _template()

    def put_in(value: Any) -> Any:
        if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in defaults:
            return defaults[value["Ref"]]
        if isinstance(value, dict) and set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
            return re.sub(r"\$\{(\w+)\}", lambda m: defaults[m[1]], value["Fn::Sub"])
        if isinstance(value, dict):
            return {k: put_in(v) for k, v in value.items()}
        if isinstance(value, list):
            return [put_in(v) for v in value]
        return value

    return dict(put_in(template["Resources"][logical_id]["Properties"]))


def state(logical_id: str, **series: list[float | None]) -> tuple[str, list[float | None]]:
    props = alarm(logical_id)
    values = evaluate(props["Metrics"], series, period_seconds=300)
    return alarm_state(values, props), values


# --- conservation: every message sent is accounted for ----------------------------------------------

PERIODS = 6
NONE = [0.0] * PERIODS


def traffic(**overrides: list[float | None]) -> dict[str, list[float | None]]:
    """Steady: 1000 sent and processed per 5 minutes, 50 waiting and 10 in flight, nothing dead-lettered."""
    base: dict[str, list[float | None]] = {
        "sent": [1000.0] * PERIODS, "processed": [1000.0] * PERIODS, "duplicates": list(NONE),
        "isolated": list(NONE), "wvisible": [50.0] * PERIODS, "winflight": [10.0] * PERIODS,
        "wdelayed": list(NONE), "dvisible": list(NONE), "dinflight": list(NONE), "ddeleted": list(NONE),
    }  # fmt: skip
    return {**base, **overrides}


def test_given_steady_traffic_then_every_message_is_accounted_for_and_conservation_is_ok():
    result, values = state("OrdersQueueConservationAlarm", **traffic())
    assert values[1:] == [-100.0] * (PERIODS - 1)  # 0 unaccounted, less the 10 % tolerance of 1000 sent
    assert result == "OK"


def test_given_records_deleted_without_an_outcome_then_conservation_alarms_after_three_periods():
    # Given the soak's --sabotage delete-failed: 300 of every 1000 records fail and are deleted anyway
    # (no outcome, no DLQ), from the third period on
    processed: list[float | None] = [1000.0, 1000.0, 700.0, 700.0, 700.0, 700.0]
    # When the alarm evaluates, then the excess (300 - 10 % of 1000 = 200 > 10) breaches every period
    result, values = state("OrdersQueueConservationAlarm", **traffic(processed=processed))
    assert values[2:] == [200.0] * 4
    assert result == "ALARM"
    # ... but two periods of it are not yet three of three
    result, _ = state("OrdersQueueConservationAlarm", **traffic(processed=[*processed[:4], 1000.0, 1000.0]))
    assert result == "OK"


def test_given_a_loss_below_the_tolerance_then_conservation_cannot_see_it():
    # 5 % of the traffic lost: under ConservationTolerancePercent (10) — what the runbook says it misses
    result, _ = state("OrdersQueueConservationAlarm", **traffic(processed=[950.0] * PERIODS))
    assert result == "OK"


def test_given_a_backlog_that_builds_and_drains_then_the_queue_holds_the_difference():
    # Producers outpace the consumer for two periods (the queue's average depth rises by 500 each),
    # then the consumer catches up: nothing is lost, the change of what the queue holds accounts for it
    sent: list[float | None] = [1000.0, 1500.0, 1500.0, 1000.0, 1000.0, 1000.0]
    processed: list[float | None] = [1000.0, 1000.0, 1000.0, 1500.0, 1500.0, 1000.0]
    visible: list[float | None] = [50.0, 550.0, 1050.0, 550.0, 50.0, 50.0]
    result, values = state(
        "OrdersQueueConservationAlarm", **traffic(sent=sent, processed=processed, wvisible=visible)
    )
    assert [v for v in values[1:] if v is not None and v > 0] == []
    assert result == "OK"


def test_given_messages_moved_to_the_dlq_and_redriven_then_they_are_accounted_for():
    # 100 records per period exhaust their receives: SQS moves them to the DLQ (its depth rises by 100),
    # the redrive takes them out again (100 deleted from the DLQ): accounted for as dead-lettered
    result, values = state(
        "OrdersQueueConservationAlarm",
        **traffic(
            processed=[900.0] * PERIODS,
            dvisible=[0.0, 100.0, 100.0, 100.0, 100.0, 100.0],
            ddeleted=[0.0, 0.0, 100.0, 100.0, 100.0, 100.0],
        ),
    )
    assert values[2:] == [-100.0] * 4
    assert result == "OK"


def test_given_redeliveries_then_duplicates_count_as_outcomes_and_never_alarm():
    # at-least-once: 200 redelivered copies per period skipped as duplicates: over-accounted, never lost
    result, values = state("OrdersQueueConservationAlarm", **traffic(duplicates=[200.0] * PERIODS))
    assert all(v is not None and v < 0 for v in values[1:])
    assert result == "OK"


def test_given_no_traffic_then_there_is_no_datapoint_and_conservation_is_ok():
    quiet: dict[str, list[float | None]] = {k: [None] * PERIODS for k in traffic()}
    result, values = state("OrdersQueueConservationAlarm", **quiet)
    assert result == "OK"
    assert values[1:] == [0.0] * (PERIODS - 1)  # FILL makes it 0, never a breach


# --- time to drain ---------------------------------------------------------------------------------


def test_given_a_small_steady_backlog_then_it_drains_within_a_period_and_does_not_warn():
    result, values = state(
        "OrdersQueueTimeToDrainAlarm", visible=[50.0] * 3, sent=[1000.0] * 3, deleted=[1000.0] * 3
    )
    assert values == [15.0] * 3  # 50 waiting at 1000 per 300 s
    assert result == "OK"


def test_given_producers_outpacing_the_consumer_then_the_backlog_never_drains_and_it_warns():
    result, values = state(
        "OrdersQueueTimeToDrainAlarm",
        visible=[5000.0, 6000.0, 7000.0],
        sent=[1200.0] * 3,
        deleted=[1000.0] * 3,
    )
    assert values == [1e9] * 3
    assert result == "ALARM"


def test_given_a_large_backlog_draining_slowly_then_it_warns_and_draining_fast_it_does_not():
    # net drain 1000 per 300 s: 10000 waiting takes 3000 s (> 900), 2000 waiting 600 s
    slow, values = state(
        "OrdersQueueTimeToDrainAlarm", visible=[10000.0] * 3, sent=[1000.0] * 3, deleted=[2000.0] * 3
    )
    assert values == [3000.0] * 3
    assert slow == "ALARM"
    fast, _ = state(
        "OrdersQueueTimeToDrainAlarm", visible=[2000.0] * 3, sent=[1000.0] * 3, deleted=[2000.0] * 3
    )
    assert fast == "OK"


def test_given_an_empty_idle_queue_then_time_to_drain_is_zero():
    result, values = state(
        "OrdersQueueTimeToDrainAlarm", visible=[0.0] * 3, sent=[None] * 3, deleted=[None] * 3
    )
    assert values == [0.0] * 3
    assert result == "OK"


# --- the redrive state machine's failures, the breaker aside -----------------------------------------


def test_given_failed_executions_while_the_breaker_is_open_then_they_do_not_page():
    result, _ = state("OrdersRedriveStateMachineExecutionsFailedAlarm", failed=[2.0], breaker=[1.0])
    assert result == "OK"  # CircuitBreakerOpen ends an execution as Failed, by design


def test_given_failed_executions_with_the_breaker_closed_then_it_pages():
    result, values = state("OrdersRedriveStateMachineExecutionsFailedAlarm", failed=[1.0], breaker=[None])
    assert values == [1.0]
    assert result == "ALARM"


# --- the evaluator itself ----------------------------------------------------------------------------


def test_missing_operands_drop_the_datapoint_and_fill_restores_it():
    metrics: list[dict[str, Any]] = [
        {"Id": "a", "MetricStat": {}, "ReturnData": False},
        {"Id": "b", "MetricStat": {}, "ReturnData": False},
        {"Id": "out", "Expression": "a - b + FILL(b, 7) * 2 / PERIOD(a)"},
    ]
    assert evaluate(metrics, {"a": [10.0, None], "b": [None, 1.0]}, period_seconds=2) == [None, None]
    assert evaluate(metrics, {"a": [10.0, 4.0], "b": [2.0, 1.0]}, period_seconds=2) == [10.0, 4.0]


@pytest.mark.parametrize("expression", ["a +", "SUM(a)", "nope * 2", "a $ 2"])
def test_an_expression_outside_what_is_supported_is_refused_by_name(expression):
    metrics = [{"Id": "a", "MetricStat": {}, "ReturnData": False}, {"Id": "out", "Expression": expression}]
    with pytest.raises(MetricMathError):
        evaluate(metrics, {"a": [1.0]})


def test_every_expression_in_the_template_is_one_the_evaluator_reads():
    # so a new math alarm cannot silently fall outside what these tests can evaluate
    template, _ = _template()
    math = {
        lid: props
        for lid, r in template["Resources"].items()
        if r["Type"] == "AWS::CloudWatch::Alarm" and "Metrics" in (props := r["Properties"])
    }
    workloads = workload_names(template)
    assert set(math) == {  # each workload's three (one loop body: the tests read the first one's)
        f"{name}{alarm_id}"
        for name in workloads
        for alarm_id in (
            "QueueConservationAlarm",
            "QueueTimeToDrainAlarm",
            "RedriveStateMachineExecutionsFailedAlarm",
        )
    }
    for lid in math:
        props = alarm(lid)
        ids = [m["Id"] for m in props["Metrics"] if "MetricStat" in m]
        values = evaluate(props["Metrics"], {i: [1.0, 2.0] for i in ids})
        assert len(values) == 2, lid
