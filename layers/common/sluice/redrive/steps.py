"""The redrive state machine's Lambda steps: plan one dead-lettered message; re-plan a refused send.

``statemachines/redrive.asl.json`` receives a batch from the dead-letter queue with
``aws-sdk:sqs:receiveMessage`` and passes each message, exactly as ReceiveMessage returned it
(``MessageId``, ``ReceiptHandle``, ``Body``, ``Attributes``, ``MessageAttributes`` with binary values
as base64 text), to the Plan Lambda as ``{"message": ..., "probeAt": ...}``, where ``probeAt`` is the
circuit breaker's half-open probe time (epoch seconds, or null). The Plan Lambda calls
:func:`plan_step`. The answer is :meth:`sluice.redrive.Decision.to_state`:

- a ``redrive`` plan is sent to ``queueUrl`` with ``DelaySeconds = sendDelaySeconds`` (≤ 900 s) and
  deleted from the DLQ; when the backoff is longer, the execution first holds the message invisible
  in the DLQ for ``holdSeconds`` and waits ``waitSeconds``;
- a ``poison`` plan goes to the poison isolator, then is deleted.

The plan is the only place the decision is made, so both redrive modes decide identically.

When the source queue refuses a send as malformed (:data:`SEND_REFUSALS`), the state machine calls
the same Lambda with ``{"refused": {"plan": ..., "error": {"Error": ..., "Cause": ...}}}``;
:func:`refusal_step` answers the poison plan, whose envelope records the refusal, exactly as the
redriver Lambda does in ``RedriveMode=lambda``.

A message is never lost here: a :class:`~sluice.errors.PermanentError` while deciding turns into a
poison plan carrying the reason; any other exception fails the step, and the state machine leaves
the message in the DLQ.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sluice import metrics
from sluice.envelope import Envelope, ErrorInfo, Seal, from_event_attributes, split
from sluice.errors import ConfigurationError, InvalidEventError, PermanentError
from sluice.fit import Offload
from sluice.limits import MAX_VISIBILITY_SECONDS
from sluice.logevents import EVENT, LogEvent
from sluice.partial import is_fifo
from sluice.redrive.contracts import PlanState
from sluice.redrive.plan import Decision, DlqMessage, decide, sendable
from sluice.redrive.settings import FIFO_NOT_REDRIVEN, RedriveSettings

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger

    from sluice.backoff import Uniform
    from sluice.metrics import MetricSink
    from sluice.redrive.breaker import Breaker

FETCH_VISIBILITY_SECONDS = 300
"""``VisibilityTimeout`` of the state machine's FetchBatch (receiveMessage) state.

It covers planning the whole batch, then sending (or isolating) the messages that do not wait, and
holding the ones that do. SQS keeps a message invisible for at most 12 hours counted from that
receive, so a hold is capped at :data:`MAX_HOLD_SECONDS`. Keep the two in step: a test reads the
definition.
"""
MAX_HOLD_SECONDS = MAX_VISIBILITY_SECONDS - FETCH_VISIBILITY_SECONDS
"""The longest ``holdSeconds`` SQS accepts for a message held at most FETCH_VISIBILITY_SECONDS
after it was received. It exceeds the longest hold a plan asks for, 12 h - 900 s: the longest
backoff (12 h - 300 s) less the 900 s sent as ``DelaySeconds``, plus the 300 s margin."""

SEND_REFUSALS = ("InvalidMessageContents", "InvalidParameterValue")
"""SQS error codes by which ``sqs:sendMessage`` refuses the message itself (characters SQS does not
allow, too large, invalid attributes): it will never be accepted, so the state machine isolates it.
Step Functions reports them as ``SQS.AmazonSQSException`` with ``Error Code: <code>`` in the cause
(``Sqs.<code>Exception`` through the aws-sdk integration); the definition matches either. Any other
failure (throttling, a missing queue, access) leaves the message in the DLQ for a later run."""

_ERROR_CODE = re.compile(r"Error Code: ([\w.]+)")
_SERVICE_SUFFIX = re.compile(r"\s*\(Service: .*\)\s*$", re.DOTALL)


def plan_step(
    event: Mapping[str, Any],
    *,
    settings: RedriveSettings,
    breaker: Breaker,
    url_of: Callable[[str], str],
    now: datetime,
    logger: Logger,
    metrics_sink: MetricSink,
    seal: Seal | None,
    offload: Offload | None = None,
    uniform: Uniform = random.uniform,
) -> PlanState:
    """Plan one Map item; count it for the breaker; return the plan.

    The item is ``{"message": <ReceiveMessage message>, "probeAt": <epoch seconds or null>}``; any
    other shape raises :class:`~sluice.errors.InvalidEventError` naming it.
    """
    if is_fifo(settings.dead_letter_queue_url):  # the step fails: the state machine leaves it in the DLQ
        raise ConfigurationError(FIFO_NOT_REDRIVEN)
    raw, probe_at = _item(event)
    message = DlqMessage.from_api(raw)
    failed_after = None if probe_at is None else datetime.fromtimestamp(probe_at, UTC)
    try:
        decision = decide(
            message,
            settings,
            now=now,
            url_of=url_of,
            seal=seal,
            offload=offload,
            hold_in_dlq=True,
            failed_after=failed_after,
            uniform=uniform,
        )
    except PermanentError as exc:
        decision = _isolate(message, settings, breaker, now, exc, seal=seal, offload=offload)
        logger.warning(
            "redrive refused; isolating",
            extra={
                **decision.ids(),
                "attempt": decision.attempt,
                "error": str(exc),
            },
        )
    if decision.envelope_problem:
        logger.warning(
            decision.envelope_problem,
            extra={EVENT: LogEvent.ENVELOPE_CORRUPT, **decision.ids(), "attempt": decision.attempt},
        )
    metrics_sink.add_metric(
        name=metrics.ENVELOPES_CORRUPT, unit="Count", value=1 if decision.envelope_problem else 0
    )
    breaker.observe(
        seen=1,
        bouncing=int(decision.bouncing),
        fresh=int(decision.fresh),
        latest_due=None if decision.due_at is None else decision.due_at.timestamp(),
    )
    metrics_sink.add_metric(name=metrics.BOUNCING_REDRIVES, unit="Count", value=1 if decision.bouncing else 0)
    state = decision.to_state()
    state["holdSeconds"] = min(state["holdSeconds"], MAX_HOLD_SECONDS)
    state["service"] = logger.service  # the workload's: the isolator counts the pill under it
    logger.info(
        "redrive planned",  # one line per DLQ message (``action``: redrive or poison)
        extra={
            EVENT: LogEvent.REDRIVE_PLANNED,
            **decision.ids(),
            "origin_id": decision.envelope.origin_id,
            "attempt": decision.attempt,
            "action": decision.action,
            "delay_seconds": decision.delay_seconds,
            "send_delay_seconds": state["sendDelaySeconds"],
            "wait_seconds": state["waitSeconds"],
            "bouncing": decision.bouncing,
            "fresh": decision.fresh,
            "probe_at": probe_at,
            "reason": decision.reason,
        },
    )
    return state


def refusal_step(
    event: Mapping[str, Any],
    *,
    settings: RedriveSettings,
    now: datetime,
    logger: Logger,
    seal: Seal | None,
    offload: Offload | None = None,
) -> PlanState:
    """The poison plan for a redrive plan whose ``sqs:sendMessage`` the source queue refused.

    ``event`` is ``{"plan": <a redrive plan>, "error": {"Error": ..., "Cause": ...}}`` (the state
    machine's Catch output). The envelope keeps its history and records the refusal as its last error
    (``RedriveRefused``), so the poison queue tells why; the message is not counted for the breaker
    again (its Plan step did).
    """
    plan = event["plan"]
    error = event.get("error") or {}
    if plan.get("action") != "redrive":
        raise PermanentError(f"only a refused redrive can be isolated this way, got {plan.get('action')!r}")
    message_id = str(plan["messageId"])
    body = plan.get("body")
    if not isinstance(body, str):
        raise PermanentError("the refused plan has no string 'body'")
    attributes = from_event_attributes(dict(plan.get("messageAttributes") or {}))
    _, envelope, _ = split(attributes, body=body, seal=seal)
    base = envelope or Envelope(origin_id=message_id)
    why = refusal_reason(error)
    planned = Decision(
        message_id=message_id,
        receipt_handle=str(plan["receiptHandle"]),
        action="redrive",
        attempt=int(plan.get("attempt") or base.attempts),
        delay_seconds=int(plan.get("delaySeconds") or 0),
        destination=str(plan["queueUrl"]),
        body=body,
        attributes=attributes,
        envelope=base,
        bouncing=bool(plan.get("bouncing", False)),
        reason=str(plan.get("reason") or ""),
    )
    decision = planned.refused(
        why, poison_queue_url=settings.poison_queue_url, now=now, seal=seal, offload=offload
    )
    written = decision.envelope
    if decision.envelope_problem:  # the Plan step sealed it: a key rotation between the two steps
        logger.warning(decision.envelope_problem, extra={EVENT: LogEvent.ENVELOPE_CORRUPT, **decision.ids()})
    logger.error(
        "send refused by the source queue; isolating",
        extra={
            EVENT: LogEvent.SEND_REFUSED,
            **decision.ids(),
            "origin_id": written.origin_id,
            "attempt": decision.attempt,
            "queue_url": plan["queueUrl"],
            "error": str(error.get("Error") or ""),
            "reason": why,
        },
    )
    return {**decision.to_state(), "service": logger.service}


def refusal_reason(error: Mapping[str, Any]) -> str:
    """``"<SQS error code>: <message>"`` from a Step Functions error output ``{"Error", "Cause"}``.

    The optimized ``sqs:sendMessage`` integration reports ``SQS.AmazonSQSException`` with the cause
    ``"<message> (Service: AmazonSQS; Status Code: 400; Error Code: <code>; Request ID: ...)"``; the
    aws-sdk integration names the code in the error (``Sqs.<code>Exception``).
    """
    name = str(error.get("Error") or "")
    cause = str(error.get("Cause") or "")
    found = _ERROR_CODE.search(cause)
    code = found.group(1) if found else name.rsplit(".", 1)[-1].removesuffix("Exception") or "unknown"
    text = _SERVICE_SUFFIX.sub("", cause).strip()
    return f"{code}: {text}" if text else code


def _item(event: Mapping[str, Any]) -> tuple[Mapping[str, Any], float | None]:
    """(the ReceiveMessage message, the probe time) of a Map item."""
    message = event.get("message") if isinstance(event, Mapping) else None
    probe_at = event.get("probeAt") if isinstance(event, Mapping) else None
    if not isinstance(message, Mapping) or not isinstance(probe_at, int | float | None):
        got = sorted(event) if isinstance(event, Mapping) else type(event).__name__
        raise InvalidEventError(
            'the redrive Plan step expects {"message": <one ReceiveMessage message>, '
            f'"probeAt": <epoch seconds or null>}}, got {got}'
        )
    return message, None if probe_at is None else float(probe_at)


def _isolate(
    message: DlqMessage,
    settings: RedriveSettings,
    breaker: Breaker,
    now: datetime,
    exc: PermanentError,
    *,
    seal: Seal | None,
    offload: Offload | None = None,
) -> Decision:
    """A poison plan for a message that cannot be planned: the reason travels in its envelope."""
    user, envelope, problem = message.split(seal)
    text = str(exc) or type(exc).__name__
    error = ErrorInfo.of(type(exc).__name__, text, at=now, receives=message.receives)
    failed = envelope.recording(error, attempts=envelope.attempts + 1)
    attributes, body = sendable(message.body, user, failed, poison=True, seal=seal, offload=offload)
    return Decision(
        message_id=message.message_id,
        receipt_handle=message.receipt_handle,
        action="poison",
        attempt=failed.attempts,
        delay_seconds=0,
        destination=settings.poison_queue_url,
        body=body,
        attributes=attributes,
        envelope=failed,
        bouncing=breaker.policy.is_bouncing(envelope, now),
        reason=f"cannot be redriven: {text}",
        envelope_problem=problem,
    )
