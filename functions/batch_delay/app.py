"""Batch-delay Lambda: wiring only. Routes delayed messages straight to their target or parks them."""

import os
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from sluice.delay import BatchDelay, DelaySettings
from sluice.sealing import load_seal

logger = Logger()
metrics = Metrics()
tracer = Tracer()

# Cold start: a bad SLUICE_* setting (or an unreadable envelope key) fails here, naming the variable.
settings = DelaySettings.from_env(os.environ)
delayer = BatchDelay(
    settings=settings,
    sqs=boto3.client("sqs"),
    s3=boto3.client("s3"),
    sfn=boto3.client("stepfunctions"),
    logger=logger,
    metrics_sink=metrics,
    seal=load_seal(settings.envelope_key_secret, client=boto3.client("secretsmanager")),
    # DelayOrchestrator=Scheduler: parked messages travel inline in EventBridge Scheduler schedules
    scheduler=boto3.client("scheduler") if settings.delay_orchestrator == "scheduler" else None,
)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return delayer.handle(event, context)
