"""Consumer Lambda: wiring only. Business logic lives in processor.py; behaviour in the sluice layer."""

import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from sluice.consumer import Consumer

import processor

logger = Logger()
metrics = Metrics()
tracer = Tracer()

# Cold start: a bad SLUICE_* setting fails here, naming the variable; so does a missing LEDGER_TABLE_NAME.
ledger = processor.Ledger.from_env(os.environ)
settlement = processor.Settlement(ledger)
consumer = Consumer.from_env(settlement.process, model=processor.Order, logger=logger, metrics_sink=metrics)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    ledger.request_id = context.aws_request_id
    return consumer.handle(event, context)
