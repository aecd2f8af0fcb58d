"""The environment every in-process benchmark runs in: offline (moto), quiet, no tracing.

Set it before anything of Powertools or boto3 is constructed (Powertools reads it at construction).
"""

from __future__ import annotations

REGION = "us-east-1"

OFFLINE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "POWERTOOLS_SERVICE_NAME": "sluice-bench",
    "POWERTOOLS_METRICS_NAMESPACE": "SluiceBench",
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_DEV": "false",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
    "LOG_LEVEL": "WARNING",
}
