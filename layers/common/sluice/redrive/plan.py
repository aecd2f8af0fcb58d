"""Redrive planning: what to do with one message taken from a dead-letter queue.

Shared by the redriver Lambda and the redrive state machine's Plan step (both arrive with the DLQ
redrive capability), so the two modes decide identically:

- ``attempt = envelope.attempts + 1`` (the failed delivery cycles so far, plus this one);
- ``attempt > max_attempts`` → the message is a poison pill: isolate it;
- otherwise wait a capped full-jitter delay ``uniform(floor, min(cap, base · 2^attempt))`` before
  re-driving it to its source queue: straight there with ``DelaySeconds`` when the delay is within the
  direct-send threshold (≤ 900 s, SQS's limit), through the long-delay pipeline beyond it.

The source queue is the queue the message came from, and no other: the ``DeadLetterQueueSourceArn``
system attribute when SQS moved it, else the ``source`` its envelope recorded (a sluice hop that
dead-lettered or isolated the message itself records the queue it failed on). Only an allowlisted
source is ever written to: a message whose source is missing or not allowlisted is refused.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Self

from sluice.arrival import DEAD_LETTER_SOURCE, Arrival
from sluice.backoff import Uniform, ceiling, whole_seconds
from sluice.envelope import (
    ATTRIBUTE,
    Envelope,
    ErrorInfo,
    Seal,
    SendAttributes,
    merge,
    split,
)
from sluice.errors import PermanentError
from sluice.fit import Offload, UnfittableError, fit
from sluice.groups import sendable_group
from sluice.limits import MAX_DELAY_SECONDS, MAX_LONG_DELAY_SECONDS, MAX_VISIBILITY_SECONDS
from sluice.redrive.breaker import as_utc
from sluice.redrive.contracts import Action, AttributeValue, PlanState
from sluice.sqs import allowlisted
from sluice.tracing import AWS_TRACE_HEADER, correlation_id

if TYPE_CHECKING:
    from sluice.redrive.settings import RedriveSettings

SOURCE_ATTRIBUTE, TRACE_ATTRIBUTE = DEAD_LETTER_SOURCE, AWS_TRACE_HEADER  # the names importers used
HOLD_MARGIN_SECONDS = 300
"""Step Functions mode holds a message invisible in the DLQ while it waits: wait + this margin."""
MAX_HOLD_WAIT = MAX_VISIBILITY_SECONDS - HOLD_MARGIN_SECONDS
"""Longest Step Functions wait (SQS keeps a message invisible for at most 12 hours)."""
DEAD_LETTERED = "MaxReceiveCountExceeded"
REFUSED = "RedriveRefused"


@dataclass(frozen=True)
class RedrivePlan:
    attempt: int
    poison: bool
    delay_seconds: int
    """Whole seconds to wait before the message is visible again on its source (0 when poison)."""
    via_delay_pipeline: bool
    """True when the delay exceeds the direct-send threshold (SQS's DelaySeconds cannot hold it)."""


def plan(
    attempts_so_far: int,
    *,
    max_attempts: int,
    base: float,
    cap: float,
    floor: float = 0.0,
    direct_send_threshold: int = MAX_DELAY_SECONDS,
    uniform: Uniform = random.uniform,
) -> RedrivePlan:
    """The decision for a message whose envelope says ``attempts_so_far`` cycles have failed."""
    if attempts_so_far < 0:
        raise ValueError(f"attempts cannot be negative, got {attempts_so_far}")
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
    if not 0 <= floor <= cap:
        raise ValueError(f"need 0 <= floor <= cap, got floor={floor} cap={cap}")
    if not 1 <= direct_send_threshold <= MAX_DELAY_SECONDS:
        raise ValueError(f"direct_send_threshold must be within 1..{MAX_DELAY_SECONDS}")
    attempt = attempts_so_far + 1
    if attempt > max_attempts:
        return RedrivePlan(attempt=attempt, poison=True, delay_seconds=0, via_delay_pipeline=False)
    top = ceiling(attempt + 1, base=base, cap=cap)  # base·2^attempt: the first redrive already doubles
    seconds = whole_seconds(uniform(floor, max(floor, top)), limit=MAX_LONG_DELAY_SECONDS)
    return RedrivePlan(
        attempt=attempt,
        poison=False,
        delay_seconds=seconds,
        via_delay_pipeline=seconds > direct_send_threshold,
    )


def source_queue(
    system_attributes: Mapping[str, Any] | None,
    *,
    recorded: str | None,
    allowlist: Iterable[str],
) -> str:
    """The queue a message goes back to: SQS's ``DeadLetterQueueSourceArn`` when present, else the
    source its envelope ``recorded``; never any other queue.

    Raises :class:`~sluice.errors.PermanentError`, naming the source and the allowlist, when there is
    none or it is not allowlisted: the message is refused (a redrive isolates it as ``RedriveRefused``,
    a replay leaves it in the poison queue). A message never chooses where it goes, and sluice never
    guesses.
    """
    allowed = tuple(allowlist)
    source = (system_attributes or {}).get(DEAD_LETTER_SOURCE) or recorded
    if not source:
        raise PermanentError(
            "no source queue: SQS named none (DeadLetterQueueSourceArn) and its envelope records none"
        )
    if not allowlisted(str(source), allowed):
        listed = ", ".join(allowed) if allowed else "nothing"
        raise PermanentError(f"source queue {source!r} is not in the redrive allowlist ({listed})")
    return str(source)


# --- one dead-lettered message -----------------------------------------------------------------


@dataclass(frozen=True)
class DlqMessage:
    """A message received from the dead-letter queue, read by :meth:`sluice.arrival.Arrival.from_message`
    (without a seal: :meth:`split` reads its envelope with the stack's)."""

    arrival: Arrival
    receipt_handle: str
    api: Mapping[str, Any] = field(repr=False, compare=False)
    """The message as ReceiveMessage gave it."""

    @classmethod
    def from_api(cls, message: Mapping[str, Any]) -> Self:
        """From ReceiveMessage's ``Messages[i]`` (boto3, or Step Functions with base64 binary values)."""
        arrival = Arrival.from_message(message, seal=None)
        if arrival.receipt_handle is None:
            raise KeyError("ReceiptHandle")  # a received message always has one
        return cls(arrival=arrival, receipt_handle=arrival.receipt_handle, api=message)

    @property
    def message_id(self) -> str:
        return self.arrival.message_id

    @property
    def body(self) -> str:
        return self.arrival.body

    @property
    def attributes(self) -> SendAttributes:
        """Every message attribute as it arrived, the envelope's included (SendMessage shape)."""
        return self.arrival.arrived

    @property
    def system(self) -> Mapping[str, Any]:
        """SQS's system attributes (``DeadLetterQueueSourceArn``, ``AWSTraceHeader``, ...)."""
        return self.arrival.system

    @property
    def receives(self) -> int | None:
        return self.arrival.receives

    def split(self, seal: Seal | None) -> tuple[SendAttributes, Envelope, str | None]:
        """(user attributes, envelope, problem), read by :meth:`sluice.arrival.Arrival.from_message` with
        ``seal``: a message without an envelope (or whose bookkeeping failed ``seal``'s check) was
        dead-lettered on its first hop, so it is its own identity, its source the
        ``DeadLetterQueueSourceArn``."""
        arrival = self.arrival if seal is None else Arrival.from_message(self.api, seal=seal)
        return arrival.attributes, arrival.envelope, arrival.problem


@dataclass(frozen=True)
class Decision:
    """What to do with one dead-lettered message, and the exact message to send."""

    message_id: str
    receipt_handle: str
    action: Action
    attempt: int
    delay_seconds: int
    """Seconds until the message is due on its source again (0 for poison)."""
    destination: str
    """Queue URL to send to: the source (redrive), the delay queue (delay) or the poison queue."""
    body: str
    attributes: SendAttributes
    """User attributes untouched, plus the updated envelope."""
    envelope: Envelope
    bouncing: bool
    """Sluice re-drove this message within the breaker's cooldown window and it is back."""
    reason: str
    envelope_problem: str | None = None
    fresh: bool = False
    """Its last failure happened after ``decide``'s ``failed_after`` (the half-open probe's time)."""
    due_at: datetime | None = None
    """When a re-driven message is due on its source again (None for poison)."""

    def ids(self) -> dict[str, str | None]:
        """What every log line about this message carries: its id and its trace's ``correlation_id``."""
        return {
            "message_id": self.message_id,
            "correlation_id": correlation_id(self.envelope.traceparent, self.envelope.trace),
        }

    @property
    def send_delay_seconds(self) -> int:
        """``DelaySeconds`` for a direct SendMessage (only a direct redrive carries a delay)."""
        return self.delay_seconds if self.action == "redrive" else 0

    def refused(
        self,
        why: str,
        *,
        poison_queue_url: str,
        now: datetime,
        seal: Seal | None,
        offload: Offload | None = None,
    ) -> Decision:
        """The poison version of this decision, for a destination that refused the message as
        malformed: the envelope keeps its history and records ``RedriveRefused`` as its last error."""
        user, envelope, problem = split(self.attributes, body=self.body, seal=seal)
        base = envelope or Envelope(origin_id=self.message_id)
        error = ErrorInfo.of(REFUSED, f"{self.destination} refused the message: {why}", at=now)
        env = base.recording(error, deliver_at=None, target=None, redriven_at=None)
        attributes, body = sendable(self.body, user, env, poison=True, seal=seal, offload=offload)
        return Decision(
            message_id=self.message_id,
            receipt_handle=self.receipt_handle,
            action="poison",
            attempt=self.attempt,
            delay_seconds=0,
            destination=poison_queue_url,
            body=body,
            attributes=attributes,
            envelope=_as_written(attributes),
            bouncing=self.bouncing,
            reason=f"the source queue refused the message: {why}",
            envelope_problem=problem or self.envelope_problem,
        )

    def to_state(self) -> PlanState:
        """The Step Functions Plan step's output (JSON-ready; binary attribute values base64).

        A redrive is sent with ``sendDelaySeconds`` (≤ 900, SQS's limit) as ``DelaySeconds``; only
        the rest of a longer backoff, ``waitSeconds``, is waited by the execution, with the message
        held invisible in the DLQ for ``holdSeconds`` meanwhile.
        """
        send_delay = min(self.delay_seconds, MAX_DELAY_SECONDS) if self.action == "redrive" else 0
        wait = max(0, self.delay_seconds - send_delay) if self.action == "redrive" else 0
        state: PlanState = {
            "messageId": self.message_id,
            "receiptHandle": self.receipt_handle,
            "action": self.action,
            "attempt": self.attempt,
            "delaySeconds": self.delay_seconds,
            "sendDelaySeconds": send_delay,
            "waitSeconds": wait,
            "holdSeconds": min(MAX_VISIBILITY_SECONDS, wait + HOLD_MARGIN_SECONDS),
            "queueUrl": self.destination,
            "body": self.body,
            "messageAttributes": {name: _state_attribute(v) for name, v in self.attributes.items()},
            "bouncing": self.bouncing,
            "reason": self.reason,
        }
        if (group := sendable_group(self.envelope.group)) is not None:
            state["groupId"] = group  # the send keeps the message's fair-queue tenant
        return state


def _state_attribute(value: Mapping[str, Any]) -> AttributeValue:
    """A SendMessage attribute as Step Functions carries it (a binary value as base64 text)."""
    out: AttributeValue = {"DataType": str(value["DataType"])}
    if "StringValue" in value:
        out["StringValue"] = str(value["StringValue"])
    binary = value.get("BinaryValue")
    if isinstance(binary, bytes | bytearray):
        out["BinaryValue"] = base64.b64encode(binary).decode()
    elif binary is not None:
        out["BinaryValue"] = str(binary)
    return out


@dataclass(frozen=True)
class _Judged:
    """What :func:`decide` knows of one message before choosing what to do with it."""

    message: DlqMessage
    user: SendAttributes
    problem: str | None
    envelope: Envelope
    """As it arrived (first-hop identity filled in)."""
    failed: Envelope
    """With this cycle's error recorded."""
    error: ErrorInfo
    bouncing: bool
    fresh: bool
    now: datetime
    seal: Seal | None
    offload: Offload | None

    def decision(
        self, action: Action, attempt: int, delay: int, *, destination: str, env: Envelope, reason: str
    ) -> Decision:
        attributes, body = sendable(
            self.message.body, self.user, env, poison=action == "poison", seal=self.seal, offload=self.offload
        )
        return Decision(
            message_id=self.message.message_id,
            receipt_handle=self.message.receipt_handle,
            action=action,
            attempt=attempt,
            delay_seconds=delay,
            destination=destination,
            body=body,
            attributes=attributes,
            envelope=_as_written(attributes),
            bouncing=self.bouncing,
            reason=reason,
            envelope_problem=self.problem,
            fresh=self.fresh,
            due_at=None if action == "poison" else self.now + timedelta(seconds=delay),
        )

    def poison(self, attempt: int, reason: str, last: ErrorInfo, *, poison_queue_url: str) -> Decision:
        env = self.failed.recording(last, attempts=attempt)
        return self.decision("poison", attempt, 0, destination=poison_queue_url, env=env, reason=reason)


def _judge(
    message: DlqMessage,
    settings: RedriveSettings,
    now: datetime,
    failed_after: datetime | None,
    *,
    seal: Seal | None,
    offload: Offload | None,
) -> _Judged:
    user, envelope, problem = message.split(seal)
    error = _cycle_error(envelope, message, now)
    return _Judged(
        message=message,
        user=user,
        problem=problem,
        envelope=envelope,
        failed=envelope.recording(error),
        error=error,
        # timed from the failure, not from when a run happens to see the message
        bouncing=settings.policy().is_bouncing(envelope, error.at),
        # only a failure the consumer recorded has a time; SQS's own move tells none
        fresh=failed_after is not None
        and error.type != DEAD_LETTERED
        and as_utc(error.at) > as_utc(failed_after),
        now=now,
        seal=seal,
        offload=offload,
    )


def _backoff(attempts: int, settings: RedriveSettings, *, hold_in_dlq: bool, uniform: Uniform) -> RedrivePlan:
    """The plan for the next attempt; a backoff held in the DLQ is capped at :data:`MAX_HOLD_WAIT`."""
    cap, floor = settings.redrive_cap_seconds, settings.redrive_floor_seconds
    if hold_in_dlq:
        cap, floor = min(cap, MAX_HOLD_WAIT), min(floor, MAX_HOLD_WAIT)
    return plan(
        attempts,
        max_attempts=settings.redrive_max_attempts,
        base=settings.redrive_base_seconds,
        cap=cap,
        floor=floor,
        direct_send_threshold=settings.direct_send_threshold_seconds,
        uniform=uniform,
    )


def decide(
    message: DlqMessage,
    settings: RedriveSettings,
    *,
    now: datetime,
    url_of: Callable[[str], str],
    seal: Seal | None,
    offload: Offload | None = None,
    hold_in_dlq: bool = False,
    failed_after: datetime | None = None,
    uniform: Uniform = random.uniform,
) -> Decision:
    """The one decision both redrive modes make for ``message`` (pure but for ``uniform``).

    ``url_of`` turns a queue ARN into the URL the caller's SQS client uses. ``hold_in_dlq`` is the
    Step Functions mode: the execution waits with the message held invisible in the DLQ, so a
    backoff never goes through the delay pipeline but is capped at :data:`MAX_HOLD_WAIT`.
    ``failed_after`` (a half-open breaker's probe time) sets :attr:`Decision.fresh`. ``seal`` checks
    the arriving envelope and seals the one sent (a forged attempt count or redrive time is ignored);
    ``offload`` stores a body that no longer fits beside its grown envelope (:mod:`sluice.fit`).
    """
    judged = _judge(message, settings, now, failed_after, seal=seal, offload=offload)
    envelope, error, poison_url = judged.envelope, judged.error, settings.poison_queue_url
    try:
        source = source_queue(message.system, recorded=envelope.source, allowlist=settings.allowlist)
    except PermanentError as exc:
        refused = ErrorInfo.of(REFUSED, str(exc), at=now, receives=message.receives)
        return judged.poison(envelope.attempts + 1, str(exc), refused, poison_queue_url=poison_url)
    p = _backoff(envelope.attempts, settings, hold_in_dlq=hold_in_dlq, uniform=uniform)
    if p.poison:
        reason = (
            f"still failing after {settings.redrive_max_attempts} redrives "
            f"(last error {error.type}: {error.message})"
        )
        return judged.poison(p.attempt, reason, error, poison_queue_url=poison_url)
    due = now + timedelta(seconds=p.delay_seconds)
    env = judged.failed.model_copy(
        update={
            "attempts": p.attempt,
            "redriven_at": due,  # when it is due on its source again: back in the DLQ soon after = bouncing
            "source": source,  # where it is re-driven to: an allowlisted queue a replay can use
            # a previous hop's delay request is over: a direct redrive is no delayed message
            "deliver_at": None,
            "target": None,
        }
    )
    target = url_of(source) if source.startswith("arn:") else source
    if p.via_delay_pipeline and not hold_in_dlq and not delay_pipeline_reaches(source, settings):
        capped = settings.direct_send_threshold_seconds
        reason = (
            f"attempt {p.attempt}: due in {capped}s, not {p.delay_seconds}s: the delay pipeline does not "
            f"deliver to {source} (add it to ExtraDelayTargetArns for the whole backoff)"
        )
        env = env.model_copy(update={"redriven_at": now + timedelta(seconds=capped)})
        return judged.decision("redrive", p.attempt, capped, destination=target, env=env, reason=reason)
    if not p.via_delay_pipeline or hold_in_dlq:
        reason = f"attempt {p.attempt}: due in {p.delay_seconds}s"
        return judged.decision(
            "redrive", p.attempt, p.delay_seconds, destination=target, env=env, reason=reason
        )
    if not settings.delay_queue_url:
        raise PermanentError("a backoff beyond the direct-send threshold needs SLUICE_DELAY_QUEUE_URL")
    return judged.decision(
        "delay",
        p.attempt,
        p.delay_seconds,
        destination=settings.delay_queue_url,
        env=env.model_copy(update={"deliver_at": due, "target": target}),
        reason=f"attempt {p.attempt}: due in {p.delay_seconds}s through the delay pipeline",
    )


def delay_pipeline_reaches(source: str, settings: RedriveSettings) -> bool:
    """True when the delay pipeline delivers to ``source`` (or its allowlist is not known here)."""
    return not settings.delay_targets or allowlisted(source, settings.delay_targets)


def sendable(
    body: str,
    user: SendAttributes,
    env: Envelope,
    *,
    poison: bool,
    seal: Seal | None,
    offload: Offload | None = None,
) -> tuple[SendAttributes, str]:
    """(attributes, body) as SQS will take them (:func:`sluice.fit.fit`: for the poison queue,
    attributes SQS refuses move into the envelope; a body too large beside the envelope is offloaded).
    Should nothing make the message fit, it is merged as it is: the send is refused, reported, and the
    message stays in the DLQ."""
    try:
        fitted = fit(body, user, env, seal=seal, quarantine=poison, offload=offload)
    except UnfittableError:
        return merge(user, env, body=body, seal=seal), body
    return fitted.attributes, fitted.body


def _as_written(attributes: SendAttributes) -> Envelope:
    """The envelope exactly as it travels (``merge`` may have filled or cleared ``displaced``)."""
    return Envelope.model_validate_json(attributes[ATTRIBUTE]["StringValue"])


def _cycle_error(envelope: Envelope, message: DlqMessage, now: datetime) -> ErrorInfo:
    """The error of the cycle that just ended: the consumer's, when it recorded one since the last
    redrive, else "dead-lettered by the queue's redrive policy" (a timeout or a crash records nothing)."""
    last = envelope.last_error
    if last is not None and (envelope.redriven_at is None or as_utc(last.at) > as_utc(envelope.redriven_at)):
        return last
    return ErrorInfo(
        type=DEAD_LETTERED,
        message="moved to the dead-letter queue by the source queue's redrive policy; "
        "the consumer recorded no error (a timeout or a crash?)",
        at=now,
        receives=message.receives,
    )
