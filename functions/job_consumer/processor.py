"""Job kinds: the one place a team edits. Each kind names its handler and its mode (docs/jobs.md):

- ``two_phase`` when the side effect must not run twice (a charge, an email to a person): the worker
  claims the row first, so only the claimant runs the handler;
- ``single`` when a repeat is tolerable (a thumbnail, a cache refresh): the handler runs, then one
  UPDATE … WHERE status = 'pending' completes the row; racing duplicates may both run it.

A handler gets the :class:`~sluice.jobs.Job` (``payload``, ``attempt``, …) and returns the JSON result
stored in the row. Raise ``PermanentError`` when retrying cannot help (the job is dead at once),
``RetryAfter(seconds)`` to retry at an exact time; any other exception is retried with capped
full-jitter backoff by the retry sweeper until ``max_attempts``.

The side effects are stand-ins writing one item per performance to the stack's DynamoDB ledger
(``LedgerTable``), keyed ``<job id>#<kind>`` with the payload's ``order_id`` (or the job id): a side
effect that really ran twice shows as two items.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sluice.errors import PermanentError, TransientError
from sluice.jobs import Job, JobKinds

CHARGE_LIMIT_CENTS = 1_000_000


class Ledger:
    """One DynamoDB item per side effect performed (``effect_key`` = ``<job id>#<kind>``, ``execution_id``
    = a new id each time)."""

    def __init__(self, table: str, dynamodb: Any) -> None:
        self._table = table
        self._dynamodb = dynamodb
        self.request_id = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Ledger:
        import boto3  # noqa: PLC0415 - only the cold start builds the client

        return cls(environ["LEDGER_TABLE_NAME"], boto3.client("dynamodb"))

    def record(self, job: Job, **details: str | int) -> None:
        item = {
            "effect_key": {"S": f"{job.id}#{job.kind}"},
            "execution_id": {"S": str(uuid.uuid4())},
            "order_id": {"S": _business_id(job)},
            "effect": {"S": job.kind},
            "attempt": {"N": str(job.attempt)},
            "performed_at": {"S": datetime.now(UTC).isoformat()},
            "request_id": {"S": self.request_id},
        }
        item.update({k: {"N": str(v)} if isinstance(v, int) else {"S": v} for k, v in details.items()})
        self._dynamodb.put_item(TableName=self._table, Item=item)


def _business_id(job: Job) -> str:
    """The payload's ``order_id`` when it has one (how the demo finds its side effects), else the job id."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    value = payload.get("order_id")
    return value if isinstance(value, str) and value else str(job.id)


def kinds(ledger: Ledger) -> JobKinds:
    registry = JobKinds()

    @registry.register("charge", mode="two_phase")
    def charge(job: Job) -> dict[str, Any]:
        """Charge a card: must never run twice. ``fail_attempts`` makes the first N attempts fail
        transiently (a flaky provider), for the demo and the tests."""
        payload = job.payload if isinstance(job.payload, dict) else {}
        cents = payload.get("amount_cents")
        if not isinstance(cents, int) or not 0 < cents <= CHARGE_LIMIT_CENTS:
            raise PermanentError(f"amount_cents must be 1..{CHARGE_LIMIT_CENTS}, got {cents!r}")
        if job.attempt <= int(payload.get("fail_attempts", 0)):
            raise TransientError(f"payment provider unavailable (attempt {job.attempt})")
        ledger.record(job, amount_cents=cents)
        return {"charged_cents": cents}

    @registry.register("thumbnail", mode="single")
    def thumbnail(job: Job) -> dict[str, Any]:
        """Render a thumbnail: a repeat only costs compute."""
        ledger.record(job)
        return {"rendered": True}

    return registry
