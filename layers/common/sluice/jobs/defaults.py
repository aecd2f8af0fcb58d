"""The job store's defaults, stated once.

:class:`~sluice.jobs.settings.JobStoreSettings` (the deployed functions) and a
:class:`~sluice.jobs.store.JobStore` or :class:`~sluice.jobs.connection.Connector` built by hand (a
producer) take them from here, so both find the same ``jobs`` table. template.yaml's parameter defaults
and docs/jobs.md's knobs table are tested against the settings (tests/unit/test_settings_defaults.py,
tests/unit/test_settings_docs.py).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_CAP_SECONDS",
    "CONNECT_TIMEOUT_SECONDS",
    "ISOLATION",
    "LEASE_SECONDS",
    "LOCK_TIMEOUT_MS",
    "MAX_ATTEMPTS",
    "SCHEMA",
    "SERIALIZATION_RETRIES",
    "STATEMENT_TIMEOUT_MS",
]

SCHEMA = "sluice"
"""The PostgreSQL schema of the ``jobs`` table: a producer's ``JobStore(...)`` without ``schema=`` writes
where the deployed job consumer (``JobsSchema``) reads."""
STATEMENT_TIMEOUT_MS = 5000
LOCK_TIMEOUT_MS = 2000
CONNECT_TIMEOUT_SECONDS = 5
ISOLATION: Final = "read committed"
SERIALIZATION_RETRIES = 5
BACKOFF_BASE_SECONDS = 30.0
BACKOFF_CAP_SECONDS = 3600.0
MAX_ATTEMPTS = 5
LEASE_SECONDS = 960
"""Longer than the longest job consumer timeout the template allows (900 s), so the default holds the
rule that a claim's lease exceeds the consumer's timeout whatever ``JobConsumerTimeoutSeconds`` is."""
