"""EventBridge Scheduler's one-time schedules, which moto stores but never fires, fired as AWS fires them.

The stack's ``AWS::Scheduler::ScheduleGroup`` resources are created in moto's scheduler backend; every
schedule a function creates in one of them with an ``at(yyyy-mm-ddThh:mm:ss)`` expression (UTC unless
its ``ScheduleExpressionTimezone`` says otherwise) is fired once its time has come:

- its target is called as its role (whose trust policy must let ``scheduler.amazonaws.com`` in; the
  call is authorized as that role's, :meth:`Deliveries.schedule_call`): a Lambda function
  (asynchronous invocation, the input as the event) or a universal SQS target
  (``arn:aws:scheduler:::aws-sdk:sqs:sendMessage`` / ``sendMessageBatch``, the input as the call's
  parameters). As in AWS, a ``SendMessageBatch`` that answers with failed entries is a successful call;
- a failed call is retried (:data:`LOCAL_RETRIES` attempts at most, :data:`RETRY_SECONDS` apart: the
  target's ``RetryPolicy`` compressed into seconds), then the input goes to the target's
  ``DeadLetterConfig`` queue, sent as the role, with the attributes AWS adds (``ERROR_CODE``,
  ``ERROR_MESSAGE``, ``SCHEDULE_ARN``, ``TARGET_ARN``, ``EXECUTION_ID``, ``RETRY_ATTEMPTS``);
- ``ActionAfterCompletion: DELETE`` deletes the schedule once it completed (delivered or dead-lettered);
  otherwise it stays, fired once.

CreateSchedule is held to what AWS enforces and sluice relies on (:func:`install_rules`): a name of 1
to 64 of ``[0-9a-zA-Z-_.]``, a target input of at most :data:`MAX_INPUT_BYTES`, an ``at()`` expression
of that exact form. Not emulated: flexible time windows, rate/cron expressions created through the API
(the template's rate schedules are :class:`~sluice_local.emulation.emulated.Schedules`'), start/end
dates, KMS keys, the 1,000 invocations/s quota.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import uuid
import weakref
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from sluice_local.emulation.deliveries import Deliveries

__all__ = ["LOCAL_RETRIES", "MAX_INPUT_BYTES", "OneTimeSchedules", "install_rules"]

log = logging.getLogger("sluice_local")

MAX_INPUT_BYTES = 256 * 1024
"""A schedule's payload, at most 256 KB (EventBridge Scheduler quotas), read as KiB."""
NAME = re.compile(r"^[0-9a-zA-Z._-]{1,64}$")
AT = re.compile(r"^at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)$")
LOCAL_RETRIES = 3
"""Attempts of a failing target (the first included), capped by its RetryPolicy's MaximumRetryAttempts + 1."""
RETRY_SECONDS = 1.0

_installed = threading.Lock()
_rules_on = False


def install_rules() -> None:
    """Refuse at CreateSchedule what AWS refuses (once per process: moto's backend class is patched)."""
    global _rules_on  # noqa: PLW0603 - one patch per process, whatever the number of stacks
    from moto.scheduler.exceptions import ValidationException  # noqa: PLC0415
    from moto.scheduler.models import EventBridgeSchedulerBackend  # noqa: PLC0415

    with _installed:
        if _rules_on:
            return
        original = EventBridgeSchedulerBackend.create_schedule

        def create_schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
            name, target = str(kwargs.get("name") or ""), kwargs.get("target") or {}
            expression = str(kwargs.get("schedule_expression") or "")
            if not NAME.match(name):
                raise ValidationException(f"Name {name!r} must be 1 to 64 of [0-9a-zA-Z-_.]")
            size = len(str(target.get("Input", "")).encode())
            if size > MAX_INPUT_BYTES:
                raise ValidationException(f"Target Input is {size} bytes; at most {MAX_INPUT_BYTES}")
            if expression.startswith("at(") and not AT.match(expression):
                raise ValidationException(f"Invalid Schedule Expression {expression}")
            return original(self, *args, **kwargs)

        EventBridgeSchedulerBackend.create_schedule = create_schedule  # type: ignore[method-assign]
        _rules_on = True


def _backend(account: str, region: str) -> Any:
    from moto.scheduler.models import scheduler_backends  # noqa: PLC0415

    return scheduler_backends[account][region]


def due_at(schedule: Any) -> datetime | None:
    """When a one-time schedule is due (UTC); None for any other expression."""
    match = AT.match(str(schedule.schedule_expression))
    if not match:
        return None
    zone = ZoneInfo(str(schedule.schedule_expression_timezone or "UTC"))
    return datetime.fromisoformat(match.group(1)).replace(tzinfo=zone).astimezone(UTC)


class OneTimeSchedules:
    """Fires the one-time schedules of the stack's schedule groups (see the module docstring)."""

    def __init__(
        self, deliveries: Deliveries, region: str, account: str, clock: Callable[[], datetime] | None = None
    ) -> None:
        self._deliveries = deliveries
        self._region, self._account = region, account
        self._clock = clock or (lambda: datetime.now(UTC))
        self._groups: set[str] = set()
        # the schedules fired or firing (the objects, not their ARNs: one deleted and created again under
        # its name is a new schedule, and fires when due as AWS fires it)
        self._started: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()
        self.fired = 0
        self.dead_lettered = 0

    def add_group(self, name: str) -> None:
        install_rules()
        backend = _backend(self._account, self._region)
        if name not in backend.schedule_groups:
            backend.create_schedule_group(name=name, tags=[])
        self._groups.add(name)

    def tick(self) -> None:
        if not self._groups:
            return
        now = self._clock()
        backend = _backend(self._account, self._region)
        for group_name in sorted(self._groups):
            group = backend.schedule_groups.get(group_name)
            # a copy (one C-level call): the endpoint's threads add schedules while this one reads
            for schedule in dict(group.schedules).values() if group is not None else []:
                due = due_at(schedule)
                if due is None or due > now or schedule.state != "ENABLED":
                    continue
                with self._lock:
                    if schedule in self._started:
                        continue
                    self._started.add(schedule)
                threading.Thread(
                    target=self._fire, args=(schedule,), name=f"schedule {schedule.name}", daemon=True
                ).start()

    def _fire(self, schedule: Any) -> None:
        target = dict(schedule.target)
        retries = int((target.get("RetryPolicy") or {}).get("MaximumRetryAttempts", 185))
        attempts = min(LOCAL_RETRIES, retries + 1)
        why: str | None = None
        for attempt in range(attempts):
            why = self._deliveries.schedule_call(target)
            if why is None:
                break
            log.warning("schedule %s: target %s failed (attempt %d): %s", schedule.name, target["Arn"],
                        attempt + 1, why)  # fmt: skip
            if attempt + 1 < attempts:
                threading.Event().wait(RETRY_SECONDS)
        with self._lock:
            self.fired += 1
        if why is not None:
            self._dead_letter(schedule, target, why, attempts - 1)
        if schedule.action_after_completion == "DELETE":
            group = _backend(self._account, self._region).schedule_groups.get(schedule.group_name)
            if group is not None and schedule.name in group.schedules:
                group.delete_schedule(schedule.name)

    def _dead_letter(self, schedule: Any, target: dict[str, Any], why: str, retries: int) -> None:
        dlq = str((target.get("DeadLetterConfig") or {}).get("Arn") or "")
        if not dlq:
            log.error("schedule %s: target failed, no dead-letter queue: dropped (%s)", schedule.name, why)
            return
        attributes = {
            "ERROR_CODE": why.split(":", 1)[0][:256] or "Error",
            "ERROR_MESSAGE": why[:1024],
            "SCHEDULE_ARN": schedule.arn,
            "TARGET_ARN": str(target.get("Arn", "")),
            "EXECUTION_ID": str(uuid.uuid4()),
            "RETRY_ATTEMPTS": str(retries),
        }
        body = str(target.get("Input") or json.dumps({}))
        sent = self._deliveries.dead_letter(dlq, str(target.get("RoleArn") or ""), body, attributes)
        if sent is not None:
            log.error("schedule %s: could not dead-letter its input to %s: %s", schedule.name, dlq, sent)
            return
        with self._lock:
            self.dead_lettered += 1
        log.error("schedule %s: target kept failing; its input is in %s (%s)", schedule.name, dlq, why)
