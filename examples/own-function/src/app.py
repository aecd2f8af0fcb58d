"""The metering team's reading consumer: wiring only. processor.py holds the business logic, the sluice
library (packaged from requirements.txt) the consumer."""

import os
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from sluice.consumer import Consumer

import processor

logger = Logger()
metrics = Metrics()
tracer = Tracer()

# Cold start: a missing or invalid SLUICE_* variable, an unreadable envelope key or a readings queue
# without what the consumer needs fails here, named (sluice.errors.ConfigurationError).
meters = processor.Meters(os.environ["METERS_TABLE"], boto3.client("dynamodb"))
consumer = Consumer.from_env(
    processor.Billing(meters).process, model=processor.MeterReading, logger=logger, metrics_sink=metrics
)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return consumer.handle(event, context)
