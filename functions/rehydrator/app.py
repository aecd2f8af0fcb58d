"""Rehydrator Lambda: wiring only. Sends a due bucket's parked messages (or sweeps stragglers)."""

import os

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from sluice.delay import DelaySettings, Rehydrator
from sluice.delay.contracts import RehydrateResult, RehydratorEvent
from sluice.sealing import load_seal

logger = Logger()
metrics = Metrics()
tracer = Tracer()

# Cold start: a bad SLUICE_* setting (or an unreadable envelope key) fails here, naming the variable.
settings = DelaySettings.from_env(os.environ)
rehydrator = Rehydrator(
    settings=settings,
    sqs=boto3.client("sqs"),
    s3=boto3.client("s3"),
    logger=logger,
    metrics_sink=metrics,
    seal=load_seal(settings.envelope_key_secret, client=boto3.client("secretsmanager")),
)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: RehydratorEvent, context: LambdaContext) -> RehydrateResult:
    return rehydrator.handle(event, context)
