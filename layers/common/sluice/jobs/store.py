"""The job store: WHERE-status transitions on one ``jobs`` row, every claimed transition fenced.

The row is the truth; a queue message is only a hint to look at it. Transitions (docs/jobs.md)::

    create ─► pending ──claim──► processing ──commit──► completed
                 │  ▲                │   │
                 │  └────reap────────┘   └──fail──► error ──due_for_retry──► pending
                 │                             └─(attempts spent)──► dead
                 └──complete_if_pending──► completed      (single-UPDATE mode)

- Every transition is one ``UPDATE … WHERE status = …`` (one round trip in autocommit mode). A claim
  writes a new claim token; ``commit`` and ``fail`` match ``claim_token`` too, so a worker whose claim
  was reaped can never finish the job: it gets :class:`~sluice.errors.LostClaim`.
- The reaper reads expired claims, then updates only rows whose token is still the one it read: a job
  that committed (or was claimed again) in between is left alone.
- A fenced transition that touched no row costs one more read, to tell ``AlreadyHandled`` / ``LostClaim``
  from the worker's own earlier attempt whose response was lost (the same token already landed). The
  store retries a statement once on a new connection when the old one broke; where a retried statement
  cannot recognise its own landing the outcome is still safe (docs/jobs.md, "The fencing rule").
- Under REPEATABLE READ / SERIALIZABLE, SQLSTATE 40001 (and deadlocks, 40P01) are retried a bounded
  number of times, then raised as :class:`~sluice.errors.JobContention`.
"""

from __future__ import annotations

import json
import random
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from sluice.backoff import Uniform, full_jitter
from sluice.errors import AlreadyHandled, JobContention, JobNotFound, JobStoreUnavailable, LostClaim
from sluice.jobs.connection import first_line

if TYPE_CHECKING:
    from sluice.jobs.connection import Connector
    from sluice.jobs.settings import JobStoreSettings

__all__ = ["Claim", "Created", "Job", "JobStore", "Reaped", "storable"]

Status = Literal["pending", "processing", "completed", "error", "dead"]
T = TypeVar("T")

MAX_ERROR_CHARS = 2000
"""An error message is cut to this many characters in the row's history."""

_COLUMNS = (
    "id, kind, payload, status, attempt, max_attempts, errors, result, claim_token, claimed_by,"
    " claimed_at, next_attempt_at, unique_key, created_at, updated_at, completed_at"
)

_SQL = {
    "insert": "INSERT INTO {jobs} (id, kind, payload, max_attempts, unique_key)"
    " VALUES (%(id)s, %(kind)s, %(payload)s, %(max_attempts)s, %(unique_key)s)"
    " ON CONFLICT DO NOTHING RETURNING id",
    "by_unique_key": "SELECT id FROM {jobs} WHERE unique_key = %(unique_key)s",
    "get": f"SELECT {_COLUMNS} FROM {{jobs}} WHERE id = %(id)s",  # noqa: S608 - constants only
    "state": "SELECT status, claim_token FROM {jobs} WHERE id = %(id)s",
    "complete_if_pending": "UPDATE {jobs} SET status = 'completed', result = %(result)s,"
    " attempt = attempt + 1, completed_at = now(), updated_at = now(), claimed_at = NULL"
    " WHERE id = %(id)s AND status = 'pending' RETURNING attempt",
    "fail_if_pending": "UPDATE {jobs} SET attempt = attempt + 1,"
    " status = CASE WHEN %(dead)s OR attempt + 1 >= max_attempts THEN 'dead' ELSE 'error' END,"
    " next_attempt_at = CASE WHEN %(dead)s OR attempt + 1 >= max_attempts THEN NULL"
    "   ELSE now() + make_interval(secs => %(delay)s) END,"
    " errors = errors || jsonb_build_array(jsonb_build_object('attempt', attempt + 1, 'at', now(),"
    "   'error', %(error)s::text, 'worker', %(worker)s::text)),"
    " updated_at = now(), claimed_at = NULL"
    " WHERE id = %(id)s AND status = 'pending' RETURNING status, attempt, next_attempt_at",
    "claim": "UPDATE {jobs} SET status = 'processing', attempt = attempt + 1, claim_token = %(token)s,"  # noqa: S608
    " claimed_at = now(), claimed_by = %(worker)s, updated_at = now()"
    f" WHERE id = %(id)s AND status = 'pending' RETURNING {_COLUMNS}",
    # One round trip for a delivery: start the run of a pending row of a known kind — a two-phase kind is
    # claimed (processing, new token, attempt + 1); a single-UPDATE kind stays pending with the run marked
    # in flight (claimed_at, token), so the reaper can count a run that never finishes. A mark already
    # there is kept, not refreshed: redeliveries of a run that keeps dying must not keep it young. Any
    # other row is only read.
    # The second SELECT sees the statement's snapshot, so a row another worker claimed meanwhile may read
    # as pending there: callers treat a row that was not started as taken.
    "start": "WITH started AS (UPDATE {jobs} SET updated_at = now(),"  # noqa: S608
    " claim_token = CASE WHEN kind = ANY(%(two_phase)s::text[]) OR claimed_at IS NULL"
    "   THEN %(token)s ELSE claim_token END,"
    " claimed_at = CASE WHEN kind = ANY(%(two_phase)s::text[]) THEN now()"
    "   ELSE coalesce(claimed_at, now()) END,"
    " claimed_by = CASE WHEN kind = ANY(%(two_phase)s::text[]) OR claimed_at IS NULL"
    "   THEN %(worker)s ELSE claimed_by END,"
    " attempt = attempt + CASE WHEN kind = ANY(%(two_phase)s::text[]) THEN 1 ELSE 0 END,"
    " status = CASE WHEN kind = ANY(%(two_phase)s::text[]) THEN 'processing' ELSE status END"
    f" WHERE id = %(id)s AND status = 'pending' AND kind = ANY(%(known)s::text[]) RETURNING {_COLUMNS})"
    " SELECT true AS started, * FROM started"
    f" UNION ALL SELECT false, {_COLUMNS} FROM {{jobs}}"
    " WHERE id = %(id)s AND NOT EXISTS (SELECT FROM started)",
    "commit": "UPDATE {jobs} SET status = 'completed', result = %(result)s, completed_at = now(),"
    " updated_at = now()"
    " WHERE id = %(id)s AND status = 'processing' AND claim_token = %(token)s RETURNING attempt",
    "fail": "UPDATE {jobs} SET"
    " status = CASE WHEN %(dead)s OR attempt >= max_attempts THEN 'dead' ELSE 'error' END,"
    " next_attempt_at = CASE WHEN %(dead)s OR attempt >= max_attempts THEN NULL"
    "   ELSE now() + make_interval(secs => %(delay)s) END,"
    " errors = errors || jsonb_build_array(jsonb_build_object('attempt', attempt, 'at', now(),"
    "   'error', %(error)s::text, 'worker', claimed_by)),"
    " updated_at = now(), claimed_at = NULL"
    " WHERE id = %(id)s AND status = 'processing' AND claim_token = %(token)s"
    " RETURNING status, attempt, next_attempt_at",
    "expired_claims": "SELECT id, claim_token FROM {jobs}"
    " WHERE status IN ('processing', 'pending') AND claimed_at IS NOT NULL"
    " AND claimed_at < now() - make_interval(secs => %(lease)s)"
    " ORDER BY claimed_at LIMIT %(limit)s",
    # A two-phase claim older than the lease goes back to pending (its attempt was counted at the claim);
    # a single-UPDATE run started that long ago never finished: it counts as an attempt now.
    "reap": "UPDATE {jobs} AS j SET"
    " status = CASE WHEN j.attempt + (j.status = 'pending')::int >= j.max_attempts"
    "   THEN 'dead' ELSE 'pending' END,"
    " attempt = j.attempt + (j.status = 'pending')::int,"
    " errors = j.errors || jsonb_build_array(jsonb_build_object("
    "   'attempt', j.attempt + (j.status = 'pending')::int, 'at', now(),"
    "   'error', CASE WHEN j.status = 'pending' THEN 'run never finished within the ' ELSE"
    "     'claim expired: no commit within the ' END || %(lease)s::text || ' s lease',"
    "   'worker', j.claimed_by)),"
    " claimed_at = NULL, claimed_by = NULL, claim_token = NULL, updated_at = now()"
    " FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS c(id, token)"
    " WHERE j.id = c.id AND j.claim_token = c.token AND j.status IN ('processing', 'pending')"
    "   AND j.claimed_at < now() - make_interval(secs => %(lease)s)"
    " RETURNING j.id, j.status",
    "due_for_retry": "UPDATE {jobs} SET status = 'pending', next_attempt_at = NULL, updated_at = now(),"
    " claimed_at = NULL"
    " WHERE status = 'error' AND id IN (SELECT id FROM {jobs}"
    "   WHERE status = 'error' AND next_attempt_at <= now()"
    "   ORDER BY next_attempt_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
    " RETURNING id",
    "stats": "SELECT status, count(*) AS jobs, min(claimed_at) AS oldest_claim,"
    " min(next_attempt_at) AS next_retry, min(updated_at) AS oldest_update FROM {jobs} GROUP BY status",
    "orphans": "UPDATE {jobs} SET updated_at = now()"
    " WHERE status = 'pending' AND claimed_at IS NULL AND id IN (SELECT id FROM {jobs}"
    "   WHERE status = 'pending' AND claimed_at IS NULL"
    "   AND updated_at < now() - make_interval(secs => %(age)s)"
    "   ORDER BY updated_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
    " RETURNING id",
}

_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
"""JSON's escape of NUL (not an escaped backslash followed by ``u0000``)."""


def storable(value: Any) -> tuple[Any, str | None]:
    """``(value, None)`` when PostgreSQL's jsonb accepts ``value``, else ``(replacement, why not)``.

    jsonb refuses what Python's json writes happily: NaN and Infinity, ``\\u0000``, lone surrogates; and
    some values are not JSON at all. A handler's result that cannot be stored must not fail the commit
    (its side effect already ran: a failed commit would have the reaper run it again), so it is replaced
    by a note saying why.
    """
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        why = f"{exc.__class__.__name__}: {str(exc)[:200]}"
    else:
        if _NUL_ESCAPE.search(text) is None:
            return value, None
        why = "contains \\u0000, which jsonb refuses"
    return {"unstorable_result": why, "type": type(value).__name__}, why


def _text(value: str) -> str:
    """Text PostgreSQL accepts: NUL escaped, lone surrogates escaped, at most MAX_ERROR_CHARS."""
    cut = value[:MAX_ERROR_CHARS].replace("\x00", "\\x00")
    return cut.encode("utf-8", "backslashreplace").decode("utf-8")


_ISOLATION = {
    "repeatable read": psycopg.IsolationLevel.REPEATABLE_READ,
    "serializable": psycopg.IsolationLevel.SERIALIZABLE,
}


@dataclass(frozen=True)
class Job:
    """One row of the ``jobs`` table."""

    id: uuid.UUID
    kind: str
    payload: Any
    status: Status
    attempt: int
    max_attempts: int
    errors: list[dict[str, Any]]
    result: Any
    claim_token: uuid.UUID | None
    claimed_by: str | None
    claimed_at: datetime | None
    next_attempt_at: datetime | None
    unique_key: str | None
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None


@dataclass(frozen=True)
class Claim:
    """A worker's exclusive hold on a job: ``token`` fences its commit or fail."""

    job: Job
    token: uuid.UUID

    @property
    def job_id(self) -> uuid.UUID:
        return self.job.id


@dataclass(frozen=True)
class Created:
    id: uuid.UUID
    created: bool
    """False when a job with the same unique key (or id) already existed."""


@dataclass(frozen=True)
class Failed:
    status: Literal["error", "dead"]
    attempt: int
    next_attempt_at: datetime | None


@dataclass(frozen=True)
class Reaped:
    pending: list[uuid.UUID] = field(default_factory=list)
    """Taken back from an expired claim: to be enqueued again."""
    dead: list[uuid.UUID] = field(default_factory=list)
    """Expired on their last attempt: no more runs."""


class JobStore:
    """Transitions of the ``jobs`` table in ``schema`` through one :class:`Connector`."""

    def __init__(
        self,
        connector: Connector,
        *,
        schema: str = "public",
        worker: str = "sluice",
        isolation: str = "read committed",
        serialization_retries: int = 5,
        backoff_base_seconds: float = 30.0,
        backoff_cap_seconds: float = 3600.0,
        default_max_attempts: int = 5,
        uniform: Uniform = random.uniform,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if isolation != "read committed" and isolation not in _ISOLATION:
            raise ValueError(f"unknown isolation level {isolation!r}")
        self._connector = connector
        self._schema = schema
        self._worker = worker
        self._isolation = _ISOLATION.get(isolation)
        self._retries = serialization_retries
        self._base = backoff_base_seconds
        self._cap = backoff_cap_seconds
        self._max_attempts = default_max_attempts
        self._uniform = uniform
        self._sleep = sleep
        table = sql.Identifier(schema, "jobs")
        self._sql = {name: sql.SQL(text).format(jobs=table) for name, text in _SQL.items()}
        self.contention_retries = 0
        """Statements retried after SQLSTATE 40001 / 40P01 (for tests, benchmarks and logs)."""

    @classmethod
    def from_settings(cls, settings: JobStoreSettings, connector: Connector, *, worker: str) -> JobStore:
        return cls(
            connector,
            schema=settings.jobs_schema,
            worker=worker,
            isolation=settings.job_isolation,
            serialization_retries=settings.job_serialization_retries,
            backoff_base_seconds=settings.job_backoff_base_seconds,
            backoff_cap_seconds=settings.job_backoff_cap_seconds,
            default_max_attempts=settings.job_max_attempts,
        )

    @property
    def schema(self) -> str:
        return self._schema

    def close(self) -> None:
        """Close the connection (a Lambda never needs to: the environment's connection is reused)."""
        self._connector.close()

    # --- creating and reading ------------------------------------------------------------------

    def create(
        self,
        kind: str,
        payload: Any = None,
        *,
        unique_key: str | None = None,
        max_attempts: int | None = None,
        job_id: uuid.UUID | None = None,
    ) -> Created:
        """Insert a pending job; idempotent on ``unique_key`` (and on ``job_id``)."""
        if not 1 <= len(kind) <= 128 or _text(kind) != kind:
            raise ValueError("a job kind is 1 to 128 characters of valid text")
        attempts = self._max_attempts if max_attempts is None else max_attempts
        if attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {attempts}")
        new_id = job_id or uuid.uuid4()
        _value, problem = storable(payload)
        if problem is not None:
            raise ValueError(f"a job payload must be JSON that jsonb accepts: {problem}")
        params = {
            "id": new_id,
            "kind": kind,
            "payload": Jsonb(payload),
            "max_attempts": attempts,
            "unique_key": unique_key,
        }
        row = self._one("insert", params)
        if row is not None:
            return Created(uuid.UUID(str(row["id"])), created=True)
        if unique_key is not None:
            existing = self._one("by_unique_key", params)
            if existing is not None:
                return Created(uuid.UUID(str(existing["id"])), created=False)
        # Our own insert whose response was lost (a random id cannot collide), or the caller's id reused.
        return Created(new_id, created=job_id is None)

    def get(self, job_id: uuid.UUID) -> Job | None:
        row = self._one("get", {"id": job_id})
        return None if row is None else Job(**row)

    # --- single-UPDATE mode --------------------------------------------------------------------

    def complete_if_pending(self, job_id: uuid.UUID, result: Any = None) -> None:
        """pending → completed in one UPDATE (attempt + 1); :class:`AlreadyHandled` when the job was not
        pending."""
        stored, _problem = storable(result)
        params = {"id": job_id, "result": Jsonb(stored)}
        if self._one("complete_if_pending", params) is None:
            raise self._not_pending(job_id)

    def fail_if_pending(
        self,
        job_id: uuid.UUID,
        error: str,
        *,
        attempt: int,
        retry_in: float | None = None,
        permanent: bool = False,
    ) -> Failed:
        """pending → error (retried after a backoff) or dead, recording ``error`` (attempt + 1); ``attempt``
        is the run that failed (the row's attempt + 1) and sets the backoff."""
        row = self._one("fail_if_pending", self._failure(job_id, error, attempt, retry_in, permanent))
        if row is None:
            raise self._not_pending(job_id)
        return Failed(**row)

    # --- two-phase mode ------------------------------------------------------------------------

    def claim(self, job_id: uuid.UUID) -> Claim:
        """pending → processing with a new claim token (attempt + 1); :class:`AlreadyHandled` otherwise."""
        token = uuid.uuid4()
        row = self._one("claim", {"id": job_id, "token": token, "worker": self._worker})
        if row is not None:
            return Claim(Job(**row), token)
        job = self.get(job_id)
        if job is not None and job.status == "processing" and job.claim_token == token:
            return Claim(job, token)  # our first try landed; its response was lost with the connection
        raise self._not_pending(job_id)

    def start(
        self, job_id: uuid.UUID, *, two_phase: Sequence[str], single: Sequence[str]
    ) -> tuple[Job, bool, Claim | None]:
        """Start a delivery's run in one round trip: a pending job of a ``two_phase`` kind is claimed, one
        of a ``single`` kind gets its attempt counted; any other job is only read.

        ``(job, started, claim)``: ``started`` when this call counted the run (``claim`` is set for a
        two-phase kind). A job that was not started is taken or not pending (:class:`AlreadyHandled` for
        the caller), or of a kind nobody handles. :class:`JobNotFound` when there is no such job.
        """
        token = uuid.uuid4()
        params = {
            "id": job_id,
            "token": token,
            "worker": self._worker,
            "two_phase": list(two_phase),
            "known": [*two_phase, *single],
        }
        row = self._one("start", params)
        if row is None:
            raise JobNotFound(f"no job {job_id} in {self._schema}.jobs")
        started = bool(row.pop("started"))
        job = Job(**row)
        if job.status == "processing" and job.claim_token == token:  # claimed now, or by our lost first try
            return job, True, Claim(job, token)
        return job, started and job.kind not in two_phase, None

    def commit(self, claim: Claim, result: Any = None) -> None:
        """processing → completed, only under ``claim``'s token; :class:`LostClaim` otherwise."""
        stored, _problem = storable(result)
        params = {"id": claim.job_id, "token": claim.token, "result": Jsonb(stored)}
        if self._one("commit", params) is None:
            self._landed_or_lost(claim, ("completed",))

    def fail(
        self, claim: Claim, error: str, *, retry_in: float | None = None, permanent: bool = False
    ) -> Failed:
        """processing → error (retry after a capped full-jitter backoff, or exactly ``retry_in`` seconds)
        or → dead (attempts spent, or ``permanent``), only under ``claim``'s token."""
        params = self._failure(claim.job_id, error, claim.job.attempt, retry_in, permanent)
        row = self._one("fail", {**params, "token": claim.token})
        if row is None:
            self._landed_or_lost(claim, ("error", "dead"))
            job = self.get(claim.job_id)
            assert job is not None  # noqa: S101 - _landed_or_lost just saw it
            return Failed(job.status, job.attempt, job.next_attempt_at)  # type: ignore[arg-type]
        return Failed(**row)

    # --- maintenance ---------------------------------------------------------------------------

    def reap(
        self,
        lease_seconds: float,
        *,
        limit: int = 500,
        between: Callable[[list[tuple[uuid.UUID, uuid.UUID]]], None] | None = None,
    ) -> Reaped:
        """Take back claims older than the lease: → pending (or → dead on the last attempt).

        Two statements: read the expired claims with their tokens, then update only rows whose token
        is still the one read (``between`` runs in between; tests use it to race a commit there).
        """
        rows = self._all("expired_claims", {"lease": float(lease_seconds), "limit": limit})
        read = [(row["id"], row["claim_token"]) for row in rows]
        if between is not None:
            between(read)
        if not read:
            return Reaped()
        params = {"ids": [r[0] for r in read], "tokens": [r[1] for r in read], "lease": float(lease_seconds)}
        reaped = Reaped()
        for row in self._all("reap", params):
            (reaped.dead if row["status"] == "dead" else reaped.pending).append(row["id"])
        return reaped

    def due_for_retry(self, *, limit: int = 500) -> list[uuid.UUID]:
        """error rows whose retry time has come → pending (``FOR UPDATE SKIP LOCKED``: concurrent
        sweepers never take the same row); returns their ids, to be enqueued."""
        return [row["id"] for row in self._all("due_for_retry", {"limit": limit})]

    def orphans(self, older_than_seconds: float, *, limit: int = 500) -> list[uuid.UUID]:
        """Pending rows untouched for ``older_than_seconds`` (their message was lost, or never sent):
        touched and returned, to be enqueued again."""
        return [row["id"] for row in self._all("orphans", {"age": float(older_than_seconds), "limit": limit})]

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per status: how many jobs, the oldest claim (processing), the next retry (error), the oldest
        update (pending: a large age means lost messages). One aggregate read."""
        out: dict[str, dict[str, Any]] = {
            status: {"jobs": 0} for status in ("pending", "processing", "completed", "error", "dead")
        }
        for row in self._all("stats", {}):
            status = row.pop("status")
            out[status] = {k: v for k, v in row.items() if v is not None}
        return out

    def migrate(self) -> list[int]:
        """Apply the schema's pending migrations (:func:`sluice.jobs.schema.migrate`); idempotent."""
        from sluice.jobs.schema import migrate  # noqa: PLC0415 - only the maintenance functions migrate

        return self._run("migrate", lambda conn: migrate(conn, self._schema), isolated=False)

    # --- internals -----------------------------------------------------------------------------

    def _failure(
        self, job_id: uuid.UUID, error: str, attempt: int, retry_in: float | None, permanent: bool
    ) -> dict[str, Any]:
        if retry_in is None:
            delay: float = full_jitter(
                max(1, attempt), base=self._base, cap=self._cap, floor=1.0, uniform=self._uniform
            )
        else:
            delay = max(0.0, float(retry_in))
        return {
            "id": job_id,
            "error": _text(str(error)),
            "worker": self._worker,
            "delay": float(delay),
            "dead": permanent,
        }

    def _not_pending(self, job_id: uuid.UUID) -> Exception:
        row = self._one("state", {"id": job_id})
        if row is None:
            return JobNotFound(f"no job {job_id} in {self._schema}.jobs")
        return AlreadyHandled(f"job {job_id} is {row['status']}, not pending")

    def _landed_or_lost(self, claim: Claim, landed: Sequence[str]) -> None:
        """After a fenced UPDATE touched nothing: fine if our own earlier try landed (same token, target
        status), else :class:`LostClaim`."""
        row = self._one("state", {"id": claim.job_id})
        if row is not None and row["status"] in landed and row["claim_token"] == claim.token:
            return
        if row is None:
            state = "gone"
        elif row["claim_token"] is None:
            state = f"{row['status']} (its claim was reaped)"
        else:
            state = f"{row['status']} under another claim"
        raise LostClaim(f"job {claim.job_id}: claim {claim.token} lost; the job is {state}")

    def _one(self, name: str, params: dict[str, Any]) -> dict[str, Any] | None:
        rows = self._all(name, params)
        return rows[0] if rows else None

    def _all(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        query = self._sql[name]

        def run(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
            with conn.cursor(row_factory=dict_row) as cur:
                cur.execute(query, params)
                return cur.fetchall() if cur.description is not None else []

        return self._run(name, run)

    def _run(self, name: str, fn: Callable[[psycopg.Connection[Any]], T], *, isolated: bool = True) -> T:
        contention = 0
        reconnected = False
        while True:
            conn = self._connector.connection()
            try:
                if self._isolation is None or not isolated:
                    return fn(conn)
                conn.isolation_level = self._isolation
                with conn.transaction():
                    return fn(conn)
            except (pg_errors.SerializationFailure, pg_errors.DeadlockDetected) as exc:
                contention += 1
                self.contention_retries += 1
                if contention > self._retries:
                    raise JobContention(
                        f"{name}: SQLSTATE {exc.sqlstate} persisted through {self._retries} retries"
                    ) from exc
                self._sleep(self._uniform(0.0, min(0.2, 0.005 * 2**contention)))
            except pg_errors.UndefinedTable as exc:
                raise JobStoreUnavailable(
                    f"{name}: {self._schema}.jobs does not exist; apply the migrations"
                    " (`sluice jobs migrate`, or let the job reaper's first run apply them)",
                    unreachable=True,
                ) from exc
            except psycopg.OperationalError as exc:
                broken = conn.closed or conn.broken
                if broken:
                    self._connector.discard()
                    if not reconnected:  # safe to send again (see the module doc)
                        reconnected = True
                        continue
                raise JobStoreUnavailable(f"{name}: {first_line(exc)}", unreachable=broken) from exc
