"""Job consumer Lambda: wiring only. A message names a job id; the row in Postgres is the truth.

Job kinds and their modes live in processor.py; the store, the modes and always-delete in the layer
(sluice.jobs, docs/jobs.md).
"""

import os
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from sluice.jobs import Connector, JobConsumer, JobConsumerSettings, JobStore, JobWorker
from sluice.sealing import load_seal

import processor

logger = Logger()
metrics = Metrics()
tracer = Tracer()

# Cold start: a bad SLUICE_* setting fails here, naming the variable. The connection opens on first use.
settings = JobConsumerSettings.from_env(os.environ)
name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "sluice-job-consumer")
connector = Connector.from_settings(settings, application_name=name)
store = JobStore.from_settings(
    settings, connector, worker=f"{name}/{os.environ.get('AWS_LAMBDA_LOG_STREAM_NAME', '')}"
)
ledger = processor.Ledger.from_env(os.environ)
consumer = JobConsumer(
    JobWorker(store, processor.kinds(ledger), logger=logger),
    sqs=boto3.client("sqs"),
    poison_queue_url=settings.poison_queue_url,
    logger=logger,
    metrics_sink=metrics,
    seal=load_seal(settings.envelope_key_secret, client=boto3.client("secretsmanager")),
    lease_seconds=settings.job_lease_seconds,
)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    ledger.request_id = context.aws_request_id
    return consumer.handle(event, context)
