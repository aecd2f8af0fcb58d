"""The redrive state machine's Plan step: one dead-lettered message in, one plan out.

``statemachines/redrive.asl.json`` receives a batch from the dead-letter queue with
``aws-sdk:sqs:receiveMessage`` and passes each message, exactly as ReceiveMessage returned it
(``MessageId``, ``ReceiptHandle``, ``Body``, ``Attributes``, ``MessageAttributes`` with binary values
as base64 text), to the Plan Lambda, which calls :func:`plan_step`. The answer is
:meth:`sluice.redrive.Decision.to_state`: the state machine holds a ``redrive`` plan invisible in the
DLQ for ``holdSeconds``, waits ``delaySeconds``, sends ``body`` and ``messageAttributes`` to
``queueUrl`` and deletes the DLQ message; a ``poison`` plan goes to the poison isolator, then is
deleted. The plan is the only place the decision is made, so both redrive modes decide identically.

A message is never lost here: a :class:`~sluice.errors.PermanentError` while deciding turns into a
poison plan carrying the reason; any other exception fails the step, and the state machine leaves
the message in the DLQ.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sluice import metrics
from sluice.envelope import MAX_ERROR_MESSAGE, Envelope, ErrorInfo, merge, split
from sluice.errors import MAX_VISIBILITY_SECONDS, PermanentError
from sluice.redrive import (
    SOURCE_ATTRIBUTE,
    TRACE_ATTRIBUTE,
    Decision,
    DlqMessage,
    RedriveSettings,
    decide,
)

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger

    from sluice.backoff import Uniform
    from sluice.breaker import Breaker
    from sluice.metrics import MetricSink

FETCH_VISIBILITY_SECONDS = 120
"""``VisibilityTimeout`` of the state machine's FetchBatch (receiveMessage) state.

A message must be held (or isolated and deleted) within this long of being received, and SQS keeps
a message invisible for at most 12 hours counted from that receive, so a hold is capped at
:data:`MAX_HOLD_SECONDS`. Keep the two in step: a test reads the definition.
"""
MAX_HOLD_SECONDS = MAX_VISIBILITY_SECONDS - FETCH_VISIBILITY_SECONDS
"""The longest ``holdSeconds`` SQS accepts for a message held at most FETCH_VISIBILITY_SECONDS
after it was received. It still exceeds the longest wait (``sluice.redrive.MAX_HOLD_WAIT``)."""


def plan_step(
    event: Mapping[str, Any],
    *,
    settings: RedriveSettings,
    breaker: Breaker,
    url_of: Callable[[str], str],
    now: datetime,
    logger: Logger,
    metrics_sink: MetricSink,
    uniform: Uniform = random.uniform,
) -> dict[str, Any]:
    """Plan one Map item (a ReceiveMessage message); count it for the breaker; return the plan."""
    message = DlqMessage.from_api(event)
    try:
        decision = decide(message, settings, now=now, url_of=url_of, hold_in_dlq=True, uniform=uniform)
    except PermanentError as exc:
        decision = _isolate(message, settings, breaker, now, exc)
        logger.warning(
            "redrive refused; isolating",
            extra={"message_id": message.message_id, "attempt": decision.attempt, "error": str(exc)},
        )
    if decision.envelope_problem:
        logger.warning(
            decision.envelope_problem, extra={"message_id": message.message_id, "attempt": decision.attempt}
        )
    metrics_sink.add_metric(
        name=metrics.ENVELOPES_CORRUPT, unit="Count", value=1 if decision.envelope_problem else 0
    )
    breaker.observe(seen=1, bouncing=int(decision.bouncing))
    metrics_sink.add_metric(name=metrics.BOUNCING_REDRIVES, unit="Count", value=1 if decision.bouncing else 0)
    state = decision.to_state()
    state["holdSeconds"] = min(int(state["holdSeconds"]), MAX_HOLD_SECONDS)
    logger.info(
        "redrive planned",
        extra={
            "message_id": decision.message_id,
            "origin_id": decision.envelope.origin_id,
            "attempt": decision.attempt,
            "action": decision.action,
            "delay_seconds": decision.delay_seconds,
            "hold_seconds": state["holdSeconds"],
            "bouncing": decision.bouncing,
            "reason": decision.reason,
        },
    )
    return state


def _isolate(
    message: DlqMessage, settings: RedriveSettings, breaker: Breaker, now: datetime, exc: PermanentError
) -> Decision:
    """A poison plan for a message that cannot be planned: the reason travels in its envelope."""
    user, envelope, problem = split(message.attributes)
    if envelope is None:
        envelope = Envelope(
            origin_id=message.message_id,
            source=message.system.get(SOURCE_ATTRIBUTE),
            trace=message.system.get(TRACE_ATTRIBUTE),
        )
    elif envelope.origin_id is None:
        envelope = envelope.model_copy(update={"origin_id": message.message_id})
    text = str(exc) or type(exc).__name__
    error = ErrorInfo(
        type=type(exc).__name__, message=text[:MAX_ERROR_MESSAGE], at=now, receives=message.receives
    )
    failed = envelope.model_copy(
        update={
            "attempts": envelope.attempts + 1,
            "first_failure": envelope.first_failure or now,
            "last_error": error,
        }
    )
    return Decision(
        message_id=message.message_id,
        receipt_handle=message.receipt_handle,
        action="poison",
        attempt=failed.attempts,
        delay_seconds=0,
        destination=settings.poison_queue_url,
        body=message.body,
        attributes=merge(user, failed),
        envelope=failed,
        bouncing=breaker.policy.is_bouncing(envelope, now),
        reason=f"cannot be redriven: {text}",
        envelope_problem=problem,
    )
