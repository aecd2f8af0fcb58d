"""Redriver Lambda: wiring only. Drains the work DLQ back to its sources (see sluice.redriver).

Triggered by the DLQ depth alarm's state change (an EventBridge rule, as the redrive state machine is)
and by a backstop schedule; the event only names the trigger. One run at a time per workload: a run
that finds the workload's lease held by a live run ends at once (sluice.redrive.lease). Returns the
run's report.
"""

import functools
import os
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from sluice.redrive import Breaker, Redriver, RedriveSettings, RunLease
from sluice.redrive.contracts import RunReport
from sluice.sealing import load_seal

logger = Logger()
metrics = Metrics()
tracer = Tracer()

# Cold start: a bad SLUICE_* setting (or an unreadable envelope key) fails here, naming the variable.
settings = RedriveSettings.from_env(os.environ)
dynamodb = boto3.client("dynamodb")
redriver = Redriver(
    settings=settings,
    sqs=boto3.client("sqs"),
    breaker=Breaker.from_settings(settings, dynamodb),
    lease=RunLease.from_settings(settings, dynamodb),  # one run at a time: the velocity is the workload's
    logger=logger,
    metrics_sink=metrics,
    seal=load_seal(settings.envelope_key_secret, client=boto3.client("secretsmanager")),
    offload=settings.offloader(functools.cache(lambda: boto3.client("s3"))),  # bodies that outgrow SQS
)


def _trigger(event: dict[str, Any]) -> str:
    if event.get("detail-type") == "CloudWatch Alarm State Change":
        return "alarm"
    return "schedule" if event.get("source") == "aws.events" or event.get("schedule") else "manual"


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> RunReport:
    trigger = _trigger(event)
    logger.thread_safe_append_keys(trigger=trigger)
    holder = f"{context.function_name} ({trigger}, request {context.aws_request_id})"
    return redriver.run(context.get_remaining_time_in_millis, holder=holder).to_dict()
