"""Job sweeper Lambda: wiring only. Re-enqueues error rows whose retry time has come, and pending
rows that lost their message (sluice.jobs.maintenance, docs/jobs.md). Its first run applies the job store's
migrations.
"""

import os
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from sluice.jobs import Connector, JobMaintenance, JobSettings, JobStore

logger = Logger()
metrics = Metrics()
tracer = Tracer()

# Cold start: a bad SLUICE_* setting fails here, naming the variable. The connection opens on first use.
settings = JobSettings.from_env(os.environ)
name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "sluice-job-sweeper")
store = JobStore.from_settings(
    settings, Connector.from_settings(settings, application_name=name), worker=name
)
maintenance = JobMaintenance(
    store,
    sqs=boto3.client("sqs"),
    queue_url=settings.job_queue_url,
    logger=logger,
    metrics_sink=metrics,
    lease_seconds=settings.job_lease_seconds,
    orphan_seconds=settings.job_orphan_seconds,
    limit=settings.job_sweep_limit,
    migrate_schema=store.migrate,
)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return maintenance.sweep(context.get_remaining_time_in_millis).to_dict()
