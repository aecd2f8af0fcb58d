"""The Postgres job store: WHERE-status transitions, two-phase claim/commit fenced by a claim token, a
reaper and a DB-driven retry sweeper (see docs/jobs.md).

``JobStore`` holds the transitions, ``JobWorker`` runs a job in its kind's mode, ``JobConsumer`` is the
job-mode Lambda's logic, ``JobMaintenance`` the reaper's and the sweeper's; ``migrate`` applies the
schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._lazy import lazy_exports

if TYPE_CHECKING:
    from sluice.jobs.connection import Connector, dsn_from_secret
    from sluice.jobs.consumer import JobConsumer
    from sluice.jobs.maintenance import JobMaintenance, MaintenanceReport
    from sluice.jobs.schema import migrate, migrations
    from sluice.jobs.settings import JobConsumerSettings, JobSettings, JobStoreSettings
    from sluice.jobs.store import Claim, Created, Failed, Job, JobStore, Reaped, Requeue
    from sluice.jobs.worker import Delivery, JobKinds, JobWorker, Outcome, job_message, parse_job_message

REQUIRES: tuple[str, ...] = ()
"""The capabilities this one may import besides the shared core (checked by tests/unit/test_imports.py)."""

__all__ = [
    "Claim",
    "Connector",
    "Created",
    "Delivery",
    "Failed",
    "Job",
    "JobConsumer",
    "JobConsumerSettings",
    "JobKinds",
    "JobMaintenance",
    "JobSettings",
    "JobStore",
    "JobStoreSettings",
    "JobWorker",
    "MaintenanceReport",
    "Outcome",
    "Reaped",
    "Requeue",
    "dsn_from_secret",
    "job_message",
    "migrate",
    "migrations",
    "parse_job_message",
]

_lazy_getattr, __dir__ = lazy_exports(
    __name__,
    {
        "Connector": "connection",
        "dsn_from_secret": "connection",
        "JobMaintenance": "maintenance",
        "MaintenanceReport": "maintenance",
        "migrate": "schema",
        "migrations": "schema",
        "JobConsumerSettings": "settings",
        "JobSettings": "settings",
        "JobStoreSettings": "settings",
        "Claim": "store",
        "Created": "store",
        "Failed": "store",
        "Job": "store",
        "JobStore": "store",
        "Reaped": "store",
        "Requeue": "store",
        "JobConsumer": "consumer",
        "Delivery": "worker",
        "JobKinds": "worker",
        "JobWorker": "worker",
        "Outcome": "worker",
        "job_message": "worker",
        "parse_job_message": "worker",
    },
)


def __getattr__(name: str) -> object:
    """The lazy export, or a missing driver named with the extra that brings it."""
    try:
        return _lazy_getattr(name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "psycopg":
            raise
        raise ModuleNotFoundError(
            f"sluice.jobs.{name} needs psycopg, the job store's driver: install the library's jobs extra, "
            "sluice-sqs[jobs]",
            name="psycopg",
        ) from exc
