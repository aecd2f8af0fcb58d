"""Circuit-breaker check Lambda: wiring only. Answers {"isOpen", "state", "reason", ...}.

Called by the redrive state machine before every batch; evaluating may move the breaker (an automatic
open after its cooldown half-opens; a settled probe closes or re-opens it). The input is ignored.
"""

import os

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from sluice.redrive.breaker import Breaker, report
from sluice.redrive.contracts import BreakerAnswer, BreakerCheckRequest
from sluice.redrive.settings import BreakerSettings

logger = Logger()
metrics = Metrics()
tracer = Tracer()

# Cold start: a bad SLUICE_* setting fails here, naming the variable.
breaker = Breaker.from_settings(BreakerSettings.from_env(os.environ), boto3.client("dynamodb"))


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: BreakerCheckRequest, context: LambdaContext) -> BreakerAnswer:
    status = breaker.check()
    report(status, metrics)
    answer = status.to_dict()
    if status.is_open:
        logger.warning("circuit breaker is open: nothing is re-driven", extra=answer)
    else:
        logger.info("circuit breaker allows re-driving", extra=answer)
    return answer
