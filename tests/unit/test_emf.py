"""The local runtime's EMF extraction and its alarms on the extracted metrics.

The document rules are AWS's specification of the embedded metric format; the alarm rules are
CloudWatch's (exact dimensions, the statistic over the period, TreatMissingData).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit, base, single_metric
from aws_lambda_powertools.metrics.provider.cloudwatch_emf import cloudwatch

from sluice_local.emulation import emf
from sluice_local.emulation.alarms import Alarms
from sluice_local.emulation.emf import Datapoint, EmfError, Feed, datapoints, extract


def document(**root: Any) -> dict[str, Any]:
    return {
        "_aws": {
            "Timestamp": 1,
            "CloudWatchMetrics": [
                {"Namespace": "Sluice", "Dimensions": [["service"]], "Metrics": [{"Name": "NearDeadLetter"}]}
            ],
        },
        "service": "orders",
        "NearDeadLetter": [1.0, 2.0],
        **root,
    }


def test_given_a_document_then_each_dimension_set_and_metric_is_one_datapoint_with_its_values():
    doc = document(stage="prod")
    doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"] = [["service"], ["stage", "service"]]
    points = datapoints(doc)
    assert points == [
        Datapoint("Sluice", "NearDeadLetter", (("service", "orders"),), (1.0, 2.0), None),
        Datapoint("Sluice", "NearDeadLetter", (("service", "orders"), ("stage", "prod")), (1.0, 2.0), None),
    ]


@pytest.mark.parametrize(
    ("broken", "why"),
    [
        ({"_aws": {}}, "no _aws.CloudWatchMetrics"),
        ({"_aws": {"CloudWatchMetrics": []}}, "Timestamp None"),
        ({"_aws": {"Timestamp": "now", "CloudWatchMetrics": []}}, "Timestamp 'now'"),
        ({"service": 3}, "dimension 'service'"),
        ({"NearDeadLetter": "1"}, "not a number"),
        ({"NearDeadLetter": True}, "not a number"),
        ({"NearDeadLetter": []}, "not a number"),
    ],
)
def test_given_a_document_that_breaks_the_format_then_nothing_is_extracted(broken, why):
    with pytest.raises(EmfError, match=why):
        datapoints(document(**broken))


def test_given_a_directive_without_dimensions_then_nothing_is_extracted():
    doc = document()
    del doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
    with pytest.raises(EmfError, match="Dimensions and Metrics must be lists"):
        datapoints(doc)


def test_given_nan_or_infinity_then_the_line_is_not_json_and_nothing_is_put(caplog):
    put: list[list[Datapoint]] = []
    for constant in ("NaN", "Infinity", "-Infinity"):
        line = json.dumps(document()).replace("[1.0, 2.0]", f"[{constant}]")
        with caplog.at_level(logging.WARNING, logger="sluice_local"):
            extract(line, put.append)
    assert put == []
    assert caplog.text.count("is not JSON") == 3


def test_given_a_metric_without_its_root_member_then_nothing_is_extracted():
    doc = document()
    del doc["NearDeadLetter"]
    with pytest.raises(EmfError, match="no root member"):
        datapoints(doc)


def test_given_log_lines_then_only_emf_documents_are_put_and_a_broken_one_is_logged(caplog):
    put: list[list[Datapoint]] = []
    extract(json.dumps({"level": "INFO", "message": "hello"}), put.append)
    extract("not json", put.append)
    with caplog.at_level(logging.WARNING, logger="sluice_local"):
        extract(json.dumps(document(service=None)), put.append)
    assert put == []
    assert "was not extracted" in caplog.text
    extract(json.dumps(document()), put.append)
    assert [p.name for batch in put for p in batch] == ["NearDeadLetter"]


def test_given_the_capture_installed_when_powertools_flushes_then_the_document_is_printed_and_put(capsys):
    assert emf.capture_problem() is None
    feed = Feed()
    subscription = feed.subscribe()
    undo = emf.install_capture(feed.put)
    try:
        metrics = Metrics(namespace="Sluice", service="orders")
        metrics.add_metric(name="RecordsProcessed", unit=MetricUnit.Count, value=3)
        metrics.flush_metrics()
    finally:
        undo()
    assert "print" not in vars(cloudwatch)  # undone
    assert "print" not in vars(base)
    # another test's stack may still run a thread of this process that adds metrics: Powertools keeps one
    # metric set per process, so this flush may carry its values too; this test's 3 is in it, once
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    ours = [d for d in printed if d.get("service") == "orders" and 3.0 in d.get("RecordsProcessed", [])]
    assert len(ours) == 1, printed
    orders = (("service", "orders"),)
    [point] = [p for p in subscription.drain() if p.dimensions == orders and 3.0 in p.values]
    assert (point.namespace, point.name) == ("Sluice", "RecordsProcessed")
    again = [p for p in subscription.drain() if p.dimensions == orders and 3.0 in p.values]
    assert again == []  # each datapoint handed over once
    subscription.close()
    feed.put([point])  # a closed subscription keeps nothing


def test_given_the_capture_installed_then_single_metric_documents_are_put_too():
    feed = Feed()
    subscription = feed.subscribe()
    undo = emf.install_capture(feed.put)
    try:
        with single_metric(name="BreakerOpen", unit=MetricUnit.Count, value=1, namespace="Sluice") as metric:
            metric.add_dimension(name="service", value="orders")
    finally:
        undo()
    assert [(p.name, p.dimensions, p.values) for p in subscription.drain()] == [
        ("BreakerOpen", (("service", "orders"),), (1.0,))
    ]


class Recorder:
    """CloudWatch, SNS and EventBridge as the alarms call them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda **kwargs: self.calls.append((name, kwargs))


def alarms(arrived: list[list[Datapoint]], **props: Any) -> Alarms:
    recorder = Recorder()
    evaluated = Alarms(
        region="us-east-1", account="123456789012", metric=lambda queue, metric: None,
        arrived=lambda: arrived.pop(0) if arrived else [], cloudwatch=recorder, sns=recorder, events=recorder,
    )  # fmt: skip
    evaluated.add(
        "Near",
        {
            "AlarmName": "s-near",
            "Namespace": "Sluice",
            "MetricName": "NearDeadLetter",
            "Dimensions": [{"Name": "service", "Value": "s"}],
            "Statistic": "Sum",
            "Period": 300,
            "EvaluationPeriods": 1,
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
            **props,
        },
        "s",
    )
    return evaluated


def near(service: str, *values: float, **extra: str) -> Datapoint:
    dims = tuple(sorted({"service": service, **extra}.items()))
    return Datapoint("Sluice", "NearDeadLetter", dims, values, None)


def test_given_datapoints_in_a_period_then_the_alarm_applies_its_statistic_to_those_of_its_dimensions():
    # Given periods: the alarm's own (sum 2: ALARM), then, each alone, another service's datapoint, one
    # with a wider dimension set and none at all (none of them counts: not breaching)
    periods = [[near("s", 0, 2)], [near("other", 5)], [near("s", 5, stage="x")], [], [near("s", 0, 1)]]
    evaluated = alarms(periods, TreatMissingData="notBreaching")
    [alarm] = evaluated.alarms
    states = []
    for _ in periods.copy():
        evaluated.tick()
        states.append(alarm.state)
    # Then only its exact dimensions count
    assert states == ["ALARM", "OK", "OK", "OK", "ALARM"]
    assert evaluated.silent == []


def test_given_an_alarm_on_the_maximum_then_the_period_s_largest_value_decides():
    evaluated = alarms(
        [[near("s", 0, 0)], [near("s", 0, 1, 0)]], Statistic="Maximum", TreatMissingData="notBreaching"
    )
    [alarm] = evaluated.alarms
    evaluated.tick()
    assert alarm.state == "OK"
    evaluated.tick()
    assert alarm.state == "ALARM"


@pytest.mark.parametrize(
    ("treat", "expected"),
    [
        ("missing", [("INSUFFICIENT_DATA", "ALARM"), ("ALARM", "INSUFFICIENT_DATA")]),
        ("ignore", [("INSUFFICIENT_DATA", "ALARM")]),
        ("breaching", [("INSUFFICIENT_DATA", "ALARM")]),
        ("notBreaching", [("INSUFFICIENT_DATA", "ALARM"), ("ALARM", "OK")]),
    ],
)
def test_given_periods_without_datapoints_then_treat_missing_data_decides(treat, expected):
    evaluated = alarms([[near("s", 1)], [], []], TreatMissingData=treat)
    for _ in range(3):
        evaluated.tick()
    assert evaluated.alarms[0].transitions == expected


def test_given_an_alarm_on_a_service_metric_or_metric_math_then_it_stays_silent():
    evaluated = alarms([])
    evaluated.add("Errors", {"AlarmName": "s-errors", "Namespace": "AWS/Lambda", "MetricName": "Errors"}, "s")
    evaluated.add("Math", {"AlarmName": "s-math", "Metrics": [{"Id": "m", "Expression": "1"}]}, "s")
    assert evaluated.silent == ["s-errors", "s-math"]
