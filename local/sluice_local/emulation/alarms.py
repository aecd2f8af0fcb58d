"""CloudWatch alarms, evaluated by the local runtime (moto's CloudFormation skips
``AWS::CloudWatch::Alarm`` and moto never evaluates an alarm).

- On SQS queue metrics: evaluated every tick on what the runtime reads of the queue now (visible, in
  flight, delayed, age of the oldest message).
- On metrics an application puts (a namespace outside ``AWS/``: sluice's EMF metrics, which
  :mod:`sluice_local.emulation.emf` extracts from what the functions print, and what state machines
  put with ``PutMetricData``): every tick takes the datapoints that arrived since the last one, those
  whose namespace, name and exact set of dimensions are the alarm's, and applies its statistic; a tick
  without one is missing data, treated as the alarm's ``TreatMissingData`` says: ``breaching`` or
  ``notBreaching`` as such, ``ignore`` keeps the state, and ``missing`` (CloudWatch's default) is not
  considered until every evaluated period is missing: then INSUFFICIENT_DATA.
- A tick stands for one period (local time is compressed). Alarms on AWS's own service metrics (Lambda,
  Step Functions) and on metric math stay silent locally: AWS evaluates them.

State changes are recorded in CloudWatch, published to the alarm's SNS actions (whose Lambda subscribers
moto invokes) and put on the default event bus as ``CloudWatch Alarm State Change`` events, as AWS does.
"""

from __future__ import annotations

import json
import logging
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from sluice_local.emulation.emf import Datapoint
from sluice_local.emulation.iam.acting import Acting, acting_as

log = logging.getLogger("sluice_local")

_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "GreaterThanThreshold": lambda v, t: v > t,
    "GreaterThanOrEqualToThreshold": lambda v, t: v >= t,
    "LessThanThreshold": lambda v, t: v < t,
    "LessThanOrEqualToThreshold": lambda v, t: v <= t,
}

_STATISTICS: dict[str, Callable[[Sequence[float]], float]] = {
    "Sum": sum, "Maximum": max, "Minimum": min, "SampleCount": len, "Average": statistics.fmean,
}  # fmt: skip

SQS_METRICS = (
    "ApproximateNumberOfMessagesVisible",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "ApproximateAgeOfOldestMessage",
)


class Alarm:
    def __init__(self, name: str, arn: str, props: dict[str, Any]) -> None:
        self.name = name
        self.arn = arn
        self.props = props
        self.state = "INSUFFICIENT_DATA"
        self.breaches: list[bool] = []
        self.missing = 0
        """Periods in a row without a datapoint (alarms on put metrics)."""
        self.transitions: list[tuple[str, str]] = []

    @property
    def key(self) -> tuple[str, str, tuple[tuple[str, str], ...]]:
        """What a datapoint must carry to count for the alarm: namespace, name, exact dimensions."""
        dims = tuple(sorted((str(d["Name"]), str(d["Value"])) for d in self.props.get("Dimensions", [])))
        return str(self.props.get("Namespace")), str(self.props.get("MetricName")), dims

    @property
    def queue_name(self) -> str | None:
        for dim in self.props.get("Dimensions", []):
            if dim.get("Name") == "QueueName":
                return str(dim.get("Value"))
        return None


class Alarms:
    """Evaluates alarms each tick (one tick = one period) and delivers state changes."""

    def __init__(
        self,
        *,
        region: str,
        account: str,
        metric: Callable[[str, str], float | None],
        arrived: Callable[[], list[Datapoint]],
        cloudwatch: Any,
        sns: Any,
        events: Any,
    ) -> None:
        """``metric``: an SQS queue's metric now, by queue name and metric name; ``arrived``: the
        datapoints put since its last call (EMF and ``PutMetricData``)."""
        self.region = region
        self.account = account
        self._metric = metric
        self._arrived = arrived
        self._cloudwatch = cloudwatch
        self._sns = sns
        self._events = events
        self.alarms: list[Alarm] = []
        self.listeners: list[Callable[[str, str, str, str], None]] = []
        """Called with (alarm name, old state, new state, reason) on every state change (``make demo``
        prints them)."""
        self.silent: list[str] = []
        """Alarms on metrics the runtime does not compute (Lambda, Step Functions, metric math): they
        stay silent locally."""

    def add(self, logical_id: str, props: dict[str, Any], stack_name: str) -> None:
        name = str(props.get("AlarmName") or f"{stack_name}-{logical_id}")
        arn = f"arn:aws:cloudwatch:{self.region}:{self.account}:alarm:{name}"
        alarm = Alarm(name, arn, props)
        namespace = str(props.get("Namespace", ""))
        on_queue = namespace == "AWS/SQS" and props.get("MetricName") in SQS_METRICS and alarm.queue_name
        put = bool(namespace) and not namespace.startswith("AWS/") and props.get("Statistic") in _STATISTICS
        if not (on_queue or put):
            self.silent.append(name)  # reported once, by the caller, for all of them
            return
        kwargs: dict[str, Any] = {
            k: props[k]
            for k in (
                "MetricName", "Namespace", "Statistic", "Period", "EvaluationPeriods", "Threshold",
                "ComparisonOperator", "AlarmActions", "OKActions", "TreatMissingData", "AlarmDescription",
                "DatapointsToAlarm",
            )
            if k in props
        }  # fmt: skip
        kwargs["Dimensions"] = [
            {"Name": d["Name"], "Value": str(d["Value"])} for d in props.get("Dimensions", [])
        ]
        for key in ("Period", "EvaluationPeriods", "DatapointsToAlarm"):
            if key in kwargs:
                kwargs[key] = int(kwargs[key])
        kwargs["Threshold"] = float(kwargs.get("Threshold", 0))
        self._cloudwatch.put_metric_alarm(AlarmName=name, **kwargs)
        self.alarms.append(alarm)

    def tick(self) -> None:
        period: defaultdict[tuple[str, str, tuple[tuple[str, str], ...]], list[float]] = defaultdict(list)
        for point in self._arrived():
            period[point.namespace, point.name, point.dimensions].extend(point.values)
        for alarm in self.alarms:
            self._evaluate(alarm, period)

    def _value(self, alarm: Alarm, period: dict[Any, list[float]]) -> float | None:
        props = alarm.props
        if alarm.queue_name and props.get("Namespace") == "AWS/SQS":
            return self._metric(alarm.queue_name, str(props["MetricName"]))
        values = period.get(alarm.key)
        return _STATISTICS[str(props["Statistic"])](values) if values else None

    def _evaluate(self, alarm: Alarm, period: dict[Any, list[float]]) -> None:
        props = alarm.props
        value = self._value(alarm, period)
        if value is not None:
            breaching = _COMPARE[str(props.get("ComparisonOperator", "GreaterThanThreshold"))](
                value, float(props.get("Threshold", 0))
            )
        elif props.get("Namespace") == "AWS/SQS":
            return  # the queue is gone: nothing is read
        elif props.get("TreatMissingData") in ("notBreaching", "breaching"):
            breaching = props["TreatMissingData"] == "breaching"
        else:
            self._missing(alarm)
            return
        alarm.missing = 0
        periods = int(props.get("EvaluationPeriods", 1))
        needed = int(props.get("DatapointsToAlarm", periods))
        alarm.breaches = [*alarm.breaches, breaching][-periods:]
        if sum(alarm.breaches) >= needed:
            new = "ALARM"
        elif len(alarm.breaches) >= min(periods, needed) and not breaching:
            new = "OK"
        else:
            return
        if new != alarm.state:
            verdict = "breaching" if breaching else "within"
            shown = "no datapoint" if value is None else f"{value:g}"
            reason = f"{props['MetricName']} = {shown} ({verdict} threshold {props.get('Threshold')})"
            self._transition(alarm, new, reason)

    def _missing(self, alarm: Alarm) -> None:
        """A period without a datapoint. ``ignore``: the state stays. ``missing`` (the default): not
        considered, until every period evaluated is missing: then INSUFFICIENT_DATA."""
        alarm.missing += 1
        periods = int(alarm.props.get("EvaluationPeriods", 1))
        treat = alarm.props.get("TreatMissingData", "missing")
        if treat == "missing" and alarm.missing >= periods and alarm.state != "INSUFFICIENT_DATA":
            alarm.breaches = []
            self._transition(alarm, "INSUFFICIENT_DATA", f"no datapoint in {periods} period(s)")

    def _transition(self, alarm: Alarm, new: str, reason: str) -> None:
        old, alarm.state = alarm.state, new
        alarm.transitions.append((old, new))
        for listener in self.listeners:
            listener(alarm.name, old, new, reason)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000+0000")
        self._cloudwatch.set_alarm_state(AlarmName=alarm.name, StateValue=new, StateReason=reason)
        message = {
            "AlarmName": alarm.name,
            "AlarmDescription": alarm.props.get("AlarmDescription"),
            "AWSAccountId": self.account,
            "NewStateValue": new,
            "NewStateReason": reason,
            "StateChangeTime": now,
            "Region": self.region,
            "AlarmArn": alarm.arn,
            "OldStateValue": old,
            "Trigger": {
                "MetricName": alarm.props.get("MetricName"),
                "Namespace": alarm.props.get("Namespace"),
                "Dimensions": [
                    {"name": d["Name"], "value": d["Value"]} for d in alarm.props.get("Dimensions", [])
                ],
                "Threshold": alarm.props.get("Threshold"),
                "ComparisonOperator": alarm.props.get("ComparisonOperator"),
                "EvaluationPeriods": alarm.props.get("EvaluationPeriods"),
            },
        }
        actions = {"ALARM": "AlarmActions", "OK": "OKActions"}.get(new, "InsufficientDataActions")
        for action in alarm.props.get(actions, []):
            if ":sns:" in str(action):
                self._publish(alarm, str(action), message)
        detail = {
            "alarmName": alarm.name,
            "state": {"value": new, "reason": reason, "timestamp": now},
            "previousState": {"value": old},
            "configuration": {"description": alarm.props.get("AlarmDescription")},
        }
        self._events.put_events(
            Entries=[
                {
                    "Source": "aws.cloudwatch",
                    "DetailType": "CloudWatch Alarm State Change",
                    "Resources": [alarm.arn],
                    "Detail": json.dumps(detail),
                }
            ]
        )

    def _publish(self, alarm: Alarm, topic_arn: str, message: dict[str, Any]) -> None:
        """CloudWatch publishes as its service principal, for the alarm: the topic's policy (and its
        key's) must let it. A denied publish is lost, as in AWS (the alarm history says so there)."""
        cloudwatch = Acting.service_principal(
            "cloudwatch.amazonaws.com", source_arn=alarm.arn, account=self.account
        )
        try:
            with acting_as(cloudwatch):
                self._sns.publish(
                    TopicArn=topic_arn, Subject=f'ALARM: "{alarm.name}"'[:100], Message=json.dumps(message)
                )
        except Exception as exc:  # noqa: BLE001 - AccessDenied or a missing topic: the action failed
            log.error("alarm %s could not publish to %s: %s", alarm.name, topic_arn, exc)  # noqa: TRY400 - no traceback: AWS says why
