"""What moto does not do on its own, emulated by the local runtime the way AWS does it.

- EventBridge → Lambda and EventBridge → Step Functions delivery (moto only delivers to SQS, logs
  and buses): a patch of moto's rules, so it lives with every other one in
  :func:`sluice_local.emulation.moto_adapter.install_event_delivery`.
- Schedules: EventBridge rules with ``rate(...)`` (SAM ``Schedule`` events) and
  ``AWS::Scheduler::Schedule`` resources (SAM ``ScheduleV2``) fire at their rate. Locally a rate may
  also be given in seconds (``rate(5 seconds)``) through a template parameter, so the same wiring
  runs in seconds.
- CloudWatch alarms on SQS queue metrics (moto's CloudFormation skips ``AWS::CloudWatch::Alarm``):
  evaluated every tick on the metrics the runtime can compute (visible, in flight, delayed, age of
  the oldest message); state changes are recorded in CloudWatch, published to the alarm's SNS actions
  (whose Lambda subscribers moto invokes) and put on the default event bus as
  ``CloudWatch Alarm State Change`` events, as AWS does.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger("sluice_local")

_RATE = re.compile(r"^rate\(\s*(\d+)\s+(second|seconds|minute|minutes|hour|hours|day|days)\s*\)$")
_UNIT = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


def rate_seconds(expression: str) -> float | None:
    """Seconds between firings of ``rate(N unit)``; None for anything else (cron, at)."""
    match = _RATE.match(expression.strip())
    if not match:
        return None
    return int(match.group(1)) * _UNIT[match.group(2).rstrip("s")]


class Resolver:
    """Resolves the intrinsics emulated resources use, against the created stack."""

    def __init__(self, resources: dict[str, str], parameters: dict[str, Any], arns: dict[str, str]) -> None:
        self.resources = resources  # logical id → physical id
        self.parameters = parameters
        self.arns = arns  # logical id → ARN, where known

    def __call__(self, value: Any) -> Any:  # noqa: PLR0911 - one return per intrinsic
        if isinstance(value, list):
            return [self(v) for v in value]
        if not isinstance(value, dict):
            return value
        if set(value) == {"Ref"}:
            name = value["Ref"]
            if name in self.parameters:
                return self.parameters[name]
            return self.resources.get(name, name)
        if set(value) == {"Fn::GetAtt"}:
            target = value["Fn::GetAtt"]
            logical, attr = target if isinstance(target, list) else target.split(".", 1)
            return self.attribute(logical, attr)
        if set(value) == {"Fn::Sub"}:
            template = value["Fn::Sub"]
            extra: dict[str, Any] = {}
            if isinstance(template, list):
                template, extra = template[0], {k: self(v) for k, v in template[1].items()}

            def repl(match: re.Match[str]) -> str:
                key = match.group(1)
                if key in extra:
                    return str(extra[key])
                if "." in key:
                    return str(self.attribute(*key.split(".", 1)))
                return str(self({"Ref": key}))

            return re.sub(r"\$\{([^}!]+)\}", repl, template)
        if set(value) == {"Fn::Join"}:
            sep, parts = value["Fn::Join"]
            return sep.join(str(self(p)) for p in parts)
        return {k: self(v) for k, v in value.items()}

    def attribute(self, logical: str, attr: str) -> Any:
        physical = self.resources.get(logical, logical)
        if attr == "Arn" and logical in self.arns:
            return self.arns[logical]
        if attr == "QueueName":
            return physical.rsplit("/", 1)[-1]
        if attr == "TopicName":
            return physical.rsplit(":", 1)[-1]
        if attr == "Name":
            return physical.rsplit(":", 1)[-1]
        return physical


class Ticker:
    """A daemon thread calling ``tick`` every ``interval`` seconds until stopped."""

    def __init__(self, name: str, interval: float, tick: Callable[[], None]) -> None:
        self._stop = threading.Event()
        self._interval = interval
        self._tick = tick
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._tick()
            except Exception:
                log.exception("%s failed", self._thread.name)


class Schedules:
    """Fires EventBridge schedule rules and EventBridge Scheduler schedules at their rate."""

    def __init__(self, region: str, account: str) -> None:
        self.region = region
        self.account = account
        self._next: dict[str, float] = {}
        self.fired: dict[str, int] = {}
        self._entries: list[tuple[str, float, Callable[[], None]]] = []

    def add_rule(self, rule: Any, expression: str | None = None) -> None:
        expression = expression or getattr(rule, "scheduled_expression", None) or ""
        seconds = rate_seconds(expression) if expression else None
        if expression and seconds is None:
            log.warning("schedule %s: %r is not emulated locally (only rate(...))", rule.name, expression)
        if seconds is None or getattr(rule, "state", "ENABLED") != "ENABLED":
            return

        def fire() -> None:
            event = {
                "version": "0",
                "id": str(uuid.uuid4()),
                "detail-type": "Scheduled Event",
                "source": "aws.events",
                "account": self.account,
                "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "region": self.region,
                "resources": [rule.arn],
                "detail": {},
                "ingestion-time": datetime.now(UTC).isoformat(),
            }
            rule.send_to_targets(event)

        self._entries.append((rule.name, seconds, fire))

    def add_schedule(self, name: str, expression: str, fire: Callable[[], None]) -> None:
        seconds = rate_seconds(expression)
        if seconds is None:
            log.warning("schedule %s: %r is not emulated locally (only rate(...))", name, expression)
            return
        self._entries.append((name, seconds, fire))

    def tick(self) -> None:
        now = time.monotonic()
        for name, seconds, fire in self._entries:
            due = self._next.setdefault(name, now + seconds)
            if now >= due:
                self._next[name] = now + seconds
                self.fired[name] = self.fired.get(name, 0) + 1
                fire()


_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "GreaterThanThreshold": lambda v, t: v > t,
    "GreaterThanOrEqualToThreshold": lambda v, t: v >= t,
    "LessThanThreshold": lambda v, t: v < t,
    "LessThanOrEqualToThreshold": lambda v, t: v <= t,
}

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
        self.transitions: list[tuple[str, str]] = []

    @property
    def queue_name(self) -> str | None:
        for dim in self.props.get("Dimensions", []):
            if dim.get("Name") == "QueueName":
                return str(dim.get("Value"))
        return None


class Alarms:
    """Evaluates SQS alarms each tick (one tick = one period) and delivers state changes."""

    def __init__(
        self,
        *,
        region: str,
        account: str,
        metric: Callable[[str, str], float | None],
        cloudwatch: Any,
        sns: Any,
        events: Any,
    ) -> None:
        self.region = region
        self.account = account
        self._metric = metric
        self._cloudwatch = cloudwatch
        self._sns = sns
        self._events = events
        self.alarms: list[Alarm] = []
        self.listeners: list[Callable[[str, str, str, str], None]] = []
        """Called with (alarm name, old state, new state, reason) on every state change (``make demo``
        prints them)."""
        self.silent: list[str] = []
        """Alarms on metrics the runtime does not compute (Lambda, Step Functions, sluice's own EMF
        metrics, metric math): they stay silent locally."""

    def add(self, logical_id: str, props: dict[str, Any], stack_name: str) -> None:
        name = str(props.get("AlarmName") or f"{stack_name}-{logical_id}")
        arn = f"arn:aws:cloudwatch:{self.region}:{self.account}:alarm:{name}"
        alarm = Alarm(name, arn, props)
        if (
            props.get("Namespace") != "AWS/SQS"
            or props.get("MetricName") not in SQS_METRICS
            or not alarm.queue_name
        ):
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
        for alarm in self.alarms:
            self._evaluate(alarm)

    def _evaluate(self, alarm: Alarm) -> None:
        props = alarm.props
        value = self._metric(alarm.queue_name or "", str(props["MetricName"]))
        if value is None:
            return
        breaching = _COMPARE[str(props.get("ComparisonOperator", "GreaterThanThreshold"))](
            value, float(props.get("Threshold", 0))
        )
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
            reason = f"{props['MetricName']} = {value:g} ({verdict} threshold {props.get('Threshold')})"
            self._transition(alarm, new, reason)

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
                self._sns.publish(
                    TopicArn=action, Subject=f'ALARM: "{alarm.name}"'[:100], Message=json.dumps(message)
                )
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
