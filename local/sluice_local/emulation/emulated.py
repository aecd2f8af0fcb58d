"""What moto does not do on its own, emulated by the local runtime the way AWS does it.

- EventBridge → Lambda and EventBridge → Step Functions delivery (moto only delivers to SQS, logs
  and buses): a patch of moto's rules, so it lives with every other one in
  :func:`sluice_local.emulation.moto_adapter.install_event_delivery`.
- Schedules: EventBridge rules with ``rate(...)`` (SAM ``Schedule`` events) and
  ``AWS::Scheduler::Schedule`` resources (SAM ``ScheduleV2``) fire at their rate. Locally a rate may
  also be given in seconds (``rate(5 seconds)``) through a template parameter, so the same wiring
  runs in seconds. The one-time schedules functions create in an ``AWS::Scheduler::ScheduleGroup`` of
  the stack fire when due (:mod:`sluice_local.emulation.one_time`).
- CloudWatch alarms: :mod:`sluice_local.emulation.alarms`.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sluice_local.emulation.deliveries import Deliveries
from sluice_local.emulation.iam.acting import EMULATION, acting_as
from sluice_local.emulation.one_time import OneTimeSchedules

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

    def __init__(self, name: str, interval: float, tick: Callable[[], object]) -> None:
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
        with acting_as(EMULATION):  # what it does that AWS does without an API call is not authorized
            self._tick_until_stopped()

    def _tick_until_stopped(self) -> None:
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
        self.one_time: OneTimeSchedules | None = None
        """The one-time schedules of the stack's schedule groups, when it has one."""

    def add_resource(self, logical_id: str, kind: str, props: dict[str, Any], deliveries: Deliveries) -> None:
        """An ``AWS::Scheduler::Schedule`` (fired at its rate) or ``AWS::Scheduler::ScheduleGroup``."""
        if kind == "AWS::Scheduler::ScheduleGroup":
            self.one_time = self.one_time or OneTimeSchedules(deliveries, self.region, self.account)
            self.one_time.add_group(str(props.get("Name") or logical_id))
        elif props.get("State", "ENABLED") == "ENABLED":
            self.add_schedule(logical_id, str(props["ScheduleExpression"]), deliveries.schedule_target(props))

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
        if self.one_time is not None:
            self.one_time.tick()
