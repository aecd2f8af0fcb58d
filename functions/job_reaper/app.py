"""Job reaper Lambda: wiring only. Takes back claims (and single-UPDATE runs) older than the lease
and enqueues their jobs again (sluice.jobs.maintenance, docs/jobs.md). Its first run applies the
job store's migrations.
"""

import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from sluice.jobs import JobMaintenance

logger = Logger()
metrics = Metrics()
tracer = Tracer()

# Cold start: a bad SLUICE_* setting fails here, naming the variable. The connection opens on first use.
maintenance = JobMaintenance.from_env(os.environ, logger=logger, metrics_sink=metrics)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return maintenance.reap(context.get_remaining_time_in_millis).to_dict()
