"""Redrive Plan Lambda: wiring only. Plans one dead-lettered message for the redrive state machine.

Called by the state machine's Plan step with one message exactly as ReceiveMessage returned it; answers
the plan (``sluice.redrive.Decision.to_state()``): redrive after a backoff, or isolate as poison.
"""

import os
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from sluice.breaker import Breaker
from sluice.envelope import utcnow
from sluice.redrive import RedriveSettings
from sluice.redrive_sfn import plan_step
from sluice.sqs import queue_url_from_arn

logger = Logger()
metrics = Metrics()
tracer = Tracer()

# Cold start: a bad SLUICE_* setting fails here, naming the variable.
settings = RedriveSettings.from_env(os.environ)
sqs = boto3.client("sqs")  # for its endpoint only: queue URLs are built for the endpoint in use
breaker = Breaker.from_settings(settings, boto3.client("dynamodb"))


def url_of(arn: str) -> str:
    return queue_url_from_arn(arn, endpoint=sqs.meta.endpoint_url)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return plan_step(
        event,
        settings=settings,
        breaker=breaker,
        url_of=url_of,
        now=utcnow(),
        logger=logger,
        metrics_sink=metrics,
    )
