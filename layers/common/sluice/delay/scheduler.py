"""Parked messages inline in EventBridge Scheduler one-time schedules (``DelayOrchestrator=Scheduler``).

Per invocation and target queue, the batch-delay function groups its parked messages in windows of up
to 15 minutes of due times (:func:`windows`: SQS's longest ``DelaySeconds``, so a sparse stream's
messages of several buckets share one schedule) and creates one-time schedules (``at(...)``,
``ActionAfterCompletion: DELETE``) whose input IS the messages, so nothing is written to S3 and no state
machine runs:

- a window of one message: the universal target ``sqs:sendMessage``, which calls SQS itself with the
  message's body, attributes (the envelope among them) and ``DelaySeconds`` fixed at creation (due
  minus the schedule's time): one Scheduler invocation. A refused call fails the invocation, so the
  Scheduler retries it and then dead-letters it. Never ``sqs:sendMessageBatch``: SQS answers a batch
  whose entries failed with a success, which the Scheduler would take as delivered;
- a window of more: schedules targeting the rehydrator Lambda with the messages inline (one Scheduler
  invocation and one Lambda request per schedule), which computes each residual ``DelaySeconds`` when
  it runs and parks what SQS did not accept for the sweep;
- a message whose schedule input would exceed :data:`SCHEDULE_INPUT_MAX_BYTES` on its own: not
  scheduled; the caller parks it in S3 for the state machine (the path of ``DelayOrchestrator=StateMachine``).

Schedule names are deterministic (first bucket, target and the sorted message ids): a redelivered batch
recreates the same names and gets ``ConflictException``, never a second copy. Every schedule has the
Scheduler's retry policy and the stack's schedule dead-letter queue, so a target that keeps failing
leaves the input in that queue, never nowhere.

Precision (docs/delays.md): AWS invokes a schedule set at 1:00 between 1:00:00 and 1:00:59 (60-second
precision). A schedule's time is its window's nominal time, :data:`SCHEDULE_LEAD_SECONDS` before its
first bucket opens rounded down to the whole minute, so it never fires before that time. The Lambda
target sends with the residual delay computed when it runs, so it delivers on time to the second; a
window holds the messages due at most 899 s after its nominal time, so no residual exceeds SQS's 900 s.
The SQS target's ``DelaySeconds`` is fixed when the schedule is created, counted from that whole minute:
never early, as late as the Scheduler fires within its minute. A window whose nominal time has already
passed (a message parked due within about two minutes: a direct-send threshold that low is a local
``--fast`` setting) fires at the next second through the Lambda target only, whose residual is counted
when it runs.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from sluice.delay.schedule import Parked, bucket_of, encode_object
from sluice.delay.settings import DelaySettings
from sluice.errors import ConfigurationError
from sluice.groups import group_param
from sluice.limits import MAX_DELAY_SECONDS, MAX_MESSAGE_BYTES
from sluice.sqs import message_bytes

if TYPE_CHECKING:
    from mypy_boto3_scheduler import EventBridgeSchedulerClient

__all__ = [
    "SCHEDULER_PRECISION_SECONDS",
    "SCHEDULE_INPUT_MAX_BYTES",
    "SCHEDULE_LEAD_SECONDS",
    "SQS_SEND_TARGET",
    "Planned",
    "ScheduleSpec",
    "Scheduling",
    "fire_time",
    "nominal_time",
    "plan",
    "schedule_name",
    "windows",
]

SCHEDULE_INPUT_MAX_BYTES = 256_000
"""What sluice puts in one schedule's ``Target.Input``: below the Scheduler's 256 KB payload quota
(read as KiB or as 1,000 bytes, either way), so no schedule is refused for its size."""
SCHEDULE_NAME_MAX = 64
"""A schedule name: 1 to 64 of ``[0-9a-zA-Z-_.]`` (CreateSchedule's Name)."""
SCHEDULE_LEAD_SECONDS = 60
"""Schedules fire this long before their bucket opens (never in the past): room for a late invocation."""
SQS_SEND_TARGET = "arn:aws:scheduler:::aws-sdk:sqs:sendMessage"
RETRY_POLICY = {"MaximumEventAgeInSeconds": 86_400, "MaximumRetryAttempts": 185}
"""The Scheduler's longest retry (a day, 185 attempts); then the dead-letter queue."""

Kind = Literal["sqs", "lambda"]


@dataclass(frozen=True)
class ScheduleSpec:
    """One schedule to create: its name, time (epoch second), target kind, input and messages."""

    name: str
    fire_at: int
    kind: Kind
    input: str
    keys: tuple[str, ...]

    def expression(self) -> str:
        return f"at({datetime.fromtimestamp(self.fire_at, tz=UTC).strftime('%Y-%m-%dT%H:%M:%S')})"


@dataclass(frozen=True)
class Planned:
    """A bucket's schedules, and the messages that fit none (parked in S3 by the caller)."""

    schedules: tuple[ScheduleSpec, ...]
    unschedulable: tuple[Parked, ...]


def schedule_name(bucket: int, target: str, keys: Iterable[str]) -> str:
    """``d<bucket>-<40 hex>``: the same messages for the same bucket and target, the same name."""
    digest = hashlib.sha256("\n".join([str(bucket), target, *sorted(keys)]).encode()).hexdigest()[:40]
    name = f"d{bucket}-{digest}"
    if len(name) > SCHEDULE_NAME_MAX:  # a bucket beyond the year 2286 would need it
        raise ValueError(f"schedule name {name!r} is longer than {SCHEDULE_NAME_MAX}")
    return name


SCHEDULER_PRECISION_SECONDS = 60
"""AWS invokes a schedule within the minute of its time (never before it)."""


def nominal_time(bucket: int, lead: int = SCHEDULE_LEAD_SECONDS) -> int:
    """A window's nominal epoch second: ``lead`` before its first bucket opens, rounded down to the minute."""
    return (bucket - lead) // SCHEDULER_PRECISION_SECONDS * SCHEDULER_PRECISION_SECONDS


def fire_time(bucket: int, now: datetime, lead: int = SCHEDULE_LEAD_SECONDS) -> int:
    """The schedule's epoch second: the window's nominal time (a whole minute), or the next second when that
    has passed (then never after the bucket)."""
    nominal = nominal_time(bucket, lead)
    return nominal if nominal > int(now.timestamp()) else min(bucket, int(now.timestamp()) + 1)


def _wire_attributes(attributes: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """SendMessage attributes as JSON for a universal target: binary values base64, like the SDK's JSON."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in attributes.items():
        item = dict(value)
        binary = item.get("BinaryValue")
        if isinstance(binary, bytes | bytearray):
            item["BinaryValue"] = base64.b64encode(binary).decode()
        out[name] = item
    return out


def _sqs_input(target: str, message: Parked, fire_at: int) -> str:
    """SendMessage's parameters, as the universal target passes them to SQS."""
    out = message.outgoing(datetime.fromtimestamp(fire_at, tz=UTC))  # DelaySeconds when fired on time
    params: dict[str, Any] = {"QueueUrl": target, "MessageBody": out.body, "DelaySeconds": out.delay_seconds}
    if out.attributes:
        params["MessageAttributes"] = _wire_attributes(out.attributes)
    params.update(group_param(out.group))  # the fair-queue tenant, kept through the schedule
    return json.dumps(params, separators=(",", ":"))


def _lambda_input(bucket: int, name: str, messages: Sequence[Parked]) -> str:
    parked = json.loads(encode_object(bucket, messages))
    return json.dumps({"scheduled": name, "parked": parked}, separators=(",", ":"))


def _fits_sqs(messages: Sequence[Parked]) -> bool:
    """Every message sendable as it is (a parked body may still need offloading: the Lambda does that)."""
    return all(message_bytes(m.body, m.attributes) <= MAX_MESSAGE_BYTES for m in messages)


def windows(messages: Sequence[Parked], now: datetime, width: int) -> list[tuple[int, int, list[Parked]]]:
    """(first bucket, fire time, messages) per target queue: in due order, each window holding the
    messages due at most :data:`~sluice.limits.MAX_DELAY_SECONDS` (less a second) after the window's
    nominal time (:func:`nominal_time`: its first bucket less the lead, to the minute), so one schedule
    carries a sparse stream's messages of up to 15 minutes (SQS's longest delay). Membership depends on
    the messages alone, never on ``now`` (a redelivered batch makes the same windows, so the same
    names); the fire
    time is the nominal one unless that has passed (:func:`fire_time`), which only shortens the delays."""
    by_target: dict[str, list[Parked]] = defaultdict(list)
    for m in sorted(messages, key=lambda m: (m.due, m.key)):
        by_target[m.target].append(m)
    out: list[tuple[int, int, list[Parked]]] = []
    for _, group in sorted(by_target.items()):
        for m in group:
            due = m.due.timestamp()
            if (
                out
                and out[-1][2][0].target == m.target
                and (due - nominal_time(out[-1][0]) <= MAX_DELAY_SECONDS - 1)
            ):
                out[-1][2].append(m)
                continue
            bucket = bucket_of(m.due, width)
            out.append((bucket, fire_time(bucket, now), [m]))
    return out


def plan(messages: Sequence[Parked], now: datetime, width: int) -> Planned:
    """The schedules for an invocation's parked messages (see the module docstring), deterministic for a
    given set of messages; ``width``: the due-time bucket's (``SLUICE_DELAY_BUCKET_SECONDS``)."""
    schedules: list[ScheduleSpec] = []
    unschedulable: list[Parked] = []
    for bucket, fire_at, group in windows(messages, now, width):
        target = group[0].target
        # one message on time (see the module docstring: never a batch; a passed nominal time: the Lambda)
        if len(group) == 1 and fire_at == nominal_time(bucket) and _fits_sqs(group):
            text = _sqs_input(target, group[0], fire_at)
            if len(text.encode()) <= SCHEDULE_INPUT_MAX_BYTES:
                keys = tuple(m.key for m in group)
                name = schedule_name(bucket, target, keys)
                schedules.append(ScheduleSpec(name, fire_at, "sqs", text, keys))
                continue
        placeholder = "d" * SCHEDULE_NAME_MAX
        empty = len(_lambda_input(bucket, placeholder, []).encode())
        chunk: list[Parked] = []
        size = empty
        for m in group:  # greedy by size, in due order: the same set gives the same chunks
            own = len(_lambda_input(bucket, placeholder, [m]).encode()) - empty + 1  # + its comma
            if empty + own > SCHEDULE_INPUT_MAX_BYTES:
                unschedulable.append(m)
                continue
            if chunk and size + own > SCHEDULE_INPUT_MAX_BYTES:
                schedules.append(_lambda_spec(bucket, target, chunk, fire_at))
                chunk, size = [], empty
            chunk.append(m)
            size += own
        if chunk:
            schedules.append(_lambda_spec(bucket, target, chunk, fire_at))
    return Planned(tuple(schedules), tuple(unschedulable))


def _lambda_spec(bucket: int, target: str, chunk: Sequence[Parked], fire_at: int) -> ScheduleSpec:
    keys = tuple(m.key for m in chunk)
    name = schedule_name(bucket, target, keys)
    return ScheduleSpec(name, fire_at, "lambda", _lambda_input(bucket, name, chunk), keys)


class Scheduling:
    """Creates the planned schedules in the stack's group, as its scheduler role, with its DLQ."""

    def __init__(self, settings: DelaySettings, client: EventBridgeSchedulerClient | None) -> None:
        if settings.delay_orchestrator != "scheduler":
            raise ConfigurationError("Scheduling needs SLUICE_DELAY_ORCHESTRATOR=scheduler")
        if client is None:
            raise ConfigurationError("SLUICE_DELAY_ORCHESTRATOR=scheduler: a scheduler client is required")
        self._s = settings
        self._client = client

    def create(self, spec: ScheduleSpec) -> bool:
        """True when this call created the schedule, False when it already existed (a redelivered batch).
        Anything else raises (the caller retries the messages)."""
        try:
            self._client.create_schedule(
                Name=spec.name,
                GroupName=self._s.delay_schedule_group,
                ScheduleExpression=spec.expression(),
                ScheduleExpressionTimezone="UTC",
                FlexibleTimeWindow={"Mode": "OFF"},
                ActionAfterCompletion="DELETE",
                Target={
                    "Arn": SQS_SEND_TARGET if spec.kind == "sqs" else self._s.delay_rehydrator_arn,
                    "RoleArn": self._s.delay_scheduler_role_arn,
                    "Input": spec.input,
                    "RetryPolicy": {
                        "MaximumEventAgeInSeconds": RETRY_POLICY["MaximumEventAgeInSeconds"],
                        "MaximumRetryAttempts": RETRY_POLICY["MaximumRetryAttempts"],
                    },
                    "DeadLetterConfig": {"Arn": self._s.delay_schedule_dlq_arn},
                },
            )
        except self._client.exceptions.ConflictException:
            return False
        return True
