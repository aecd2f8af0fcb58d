"""Poison-pill isolator Lambda: wiring only. Moves one message to the poison queue with its forensics.

Called by the redrive state machine's Isolate step (the consumer and the redriver isolate in-process
with the same layer function, ``sluice.poison.isolate``).
"""

import os

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from sluice import metrics as names
from sluice.logevents import EVENT, LogEvent
from sluice.redrive import IsolatorSettings, isolate_request, metrics_service
from sluice.redrive.contracts import IsolateAnswer, IsolateRequest
from sluice.sealing import load_seal
from sluice.tracing import correlation_id

logger = Logger()
metrics = Metrics()
tracer = Tracer()

# Cold start: a bad SLUICE_* setting (or an unreadable envelope key) fails here, naming the variable.
settings = IsolatorSettings.from_env(os.environ)
sqs = boto3.client("sqs")
seal = load_seal(settings.envelope_key_secret, client=boto3.client("secretsmanager"))


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: IsolateRequest, context: LambdaContext) -> IsolateAnswer:
    logger.thread_safe_append_keys(message_id=event.get("messageId"), attempt=event.get("attempt"))
    poison_id, envelope, problem = isolate_request(
        sqs, poison_queue_url=settings.poison_queue_url, request=event, seal=seal
    )
    logger.thread_safe_append_keys(correlation_id=correlation_id(envelope.traceparent, envelope.trace))
    if service := metrics_service(event):  # the workload's own line, not the stack's
        metrics.add_dimension(name="service", value=service)
    metrics.add_metric(name=names.POISON_PILLS_ISOLATED, unit="Count", value=1)
    if problem:  # its envelope failed the seal check: isolated without that history
        logger.warning(problem, extra={EVENT: LogEvent.ENVELOPE_CORRUPT})
        metrics.add_metric(name=names.ENVELOPES_CORRUPT, unit="Count", value=1)
    logger.error(
        "message isolated to the poison queue",
        extra={
            EVENT: LogEvent.PLAN_ISOLATED,
            "poison_message_id": poison_id,
            "attempts": envelope.attempts,
            "error_type": envelope.last_error.type if envelope.last_error else None,
            "reason": str(event.get("reason") or "")[:512],
        },
    )
    return {"poisonMessageId": poison_id, "attempts": envelope.attempts}
