"""Redrive Plan Lambda: wiring only. Plans one dead-lettered message for the redrive state machine.

Called by the state machine's Plan step with ``{"message": <one message exactly as ReceiveMessage
returned it>, "probeAt": <the breaker's half-open probe time or null>}``; answers the plan
(``sluice.redrive.Decision.to_state()``): redrive after a backoff, or isolate as poison. Called by
the Refuse step with ``{"refused": {"plan", "error"}}`` when the source queue refused a send as
malformed; answers the poison plan that records the refusal.
"""

import functools
import os

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from sluice.envelope import utcnow
from sluice.redrive import Breaker, RedriveSettings, plan_step, refusal_step
from sluice.redrive.contracts import PlanRequest, PlanState
from sluice.sealing import load_seal
from sluice.sqs import queue_url_from_arn

logger = Logger()
metrics = Metrics()
tracer = Tracer()

# Cold start: a bad SLUICE_* setting (or an unreadable envelope key) fails here, naming the variable.
settings = RedriveSettings.from_env(os.environ)
sqs = boto3.client("sqs")  # for its endpoint only: queue URLs are built for the endpoint in use
breaker = Breaker.from_settings(settings, boto3.client("dynamodb"))
seal = load_seal(settings.envelope_key_secret, client=boto3.client("secretsmanager"))
offload = settings.offloader(functools.cache(lambda: boto3.client("s3")))  # bodies that outgrow SQS


def url_of(arn: str) -> str:
    return queue_url_from_arn(arn, endpoint=sqs.meta.endpoint_url)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: PlanRequest, context: LambdaContext) -> PlanState:
    if "refused" in event:
        return refusal_step(
            event["refused"], settings=settings, now=utcnow(), logger=logger, seal=seal, offload=offload
        )
    return plan_step(
        event,
        settings=settings,
        breaker=breaker,
        url_of=url_of,
        now=utcnow(),
        logger=logger,
        metrics_sink=metrics,
        seal=seal,
        offload=offload,
    )
