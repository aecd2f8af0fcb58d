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

The SQL is in :mod:`sluice.jobs.statements`, the row and answer types in :mod:`sluice.jobs.rows`
(re-exported here).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from sluice.backoff import Uniform, full_jitter
from sluice.errors import AlreadyHandled, JobContention, JobNotFound, JobStoreUnavailable, LostClaim
from sluice.jobs import defaults
from sluice.jobs.connection import first_line
from sluice.jobs.rows import Claim, Created, Failed, Job, Reaped, Requeue, error_text, storable
from sluice.jobs.statements import STATEMENTS
from sluice.tracing import valid_xray_header

if TYPE_CHECKING:
    from sluice.jobs.connection import Connector
    from sluice.jobs.settings import JobStoreSettings

__all__ = ["Claim", "Created", "Failed", "Job", "JobStore", "Reaped", "Requeue", "storable"]

T = TypeVar("T")

_ISOLATION = {
    "repeatable read": psycopg.IsolationLevel.REPEATABLE_READ,
    "serializable": psycopg.IsolationLevel.SERIALIZABLE,
}


class JobStore:
    """Transitions of the ``jobs`` table in ``schema`` through one :class:`Connector`.

    Every default is the deployed functions' (:mod:`sluice.jobs.defaults`): a producer building
    ``JobStore(connector)`` writes where the job consumer reads."""

    def __init__(
        self,
        connector: Connector,
        *,
        schema: str = defaults.SCHEMA,
        worker: str = "sluice",
        isolation: str = defaults.ISOLATION,
        serialization_retries: int = defaults.SERIALIZATION_RETRIES,
        backoff_base_seconds: float = defaults.BACKOFF_BASE_SECONDS,
        backoff_cap_seconds: float = defaults.BACKOFF_CAP_SECONDS,
        default_max_attempts: int = defaults.MAX_ATTEMPTS,
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
        # Rendered once, here: a Composed would be rendered again at every execute.
        self._sql = {
            name: sql.SQL(text).format(jobs=table).as_bytes(None) for name, text in STATEMENTS.items()
        }
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
        trace: str | None = None,
    ) -> Created:
        """Insert a pending job; idempotent on ``unique_key`` (and on ``job_id``). ``trace``: the
        producer's X-Ray trace header, kept for the job's messages (one that is not valid is dropped)."""
        if not 1 <= len(kind) <= 128 or error_text(kind) != kind:
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
            "trace": valid_xray_header(trace),
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

    def claim(self, job_id: uuid.UUID, *, trace: str | None = None) -> Claim:
        """pending → processing with a new claim token (attempt + 1); :class:`AlreadyHandled` otherwise.
        ``trace``: the delivery's X-Ray header, kept when the job has none yet."""
        token = uuid.uuid4()
        params = {"id": job_id, "token": token, "worker": self._worker, "trace": valid_xray_header(trace)}
        row = self._one("claim", params)
        if row is not None:
            return Claim(Job(**row), token)
        job = self.get(job_id)
        if job is not None and job.status == "processing" and job.claim_token == token:
            return Claim(job, token)  # our first try landed; its response was lost with the connection
        raise self._not_pending(job_id)

    def start(
        self,
        job_id: uuid.UUID,
        *,
        two_phase: Sequence[str],
        single: Sequence[str],
        trace: str | None = None,
    ) -> tuple[Job, bool, Claim | None]:
        """Start a delivery's run in one round trip: a pending job of a ``two_phase`` kind is claimed, one
        of a ``single`` kind gets its attempt counted; any other job is only read.

        ``(job, started, claim)``: ``started`` when this call counted the run (``claim`` is set for a
        two-phase kind). A job that was not started is taken or not pending (:class:`AlreadyHandled` for
        the caller), or of a kind nobody handles. :class:`JobNotFound` when there is no such job.
        ``trace``: the delivery's X-Ray header, kept on a pending job that has none yet (its later
        messages carry it: see :meth:`due_for_retry`).
        """
        token = uuid.uuid4()
        params = {
            "id": job_id,
            "token": token,
            "worker": self._worker,
            "two_phase": list(two_phase),
            "known": [*two_phase, *single],
            "trace": valid_xray_header(trace),
        }
        row = self._one("start", params)
        if row is None:
            raise JobNotFound(f"no job {job_id} in {self._schema}.jobs")
        started = bool(row.pop("started"))
        job = Job(**row)
        if job.status == "processing" and job.claim_token == token:  # claimed now, or by our lost first try
            return job, True, Claim(job, token)
        return job, started and job.kind not in two_phase, None

    def start_batch(
        self,
        deliveries: Sequence[tuple[uuid.UUID, str | None]],
        *,
        two_phase: Sequence[str],
        single: Sequence[str],
    ) -> dict[uuid.UUID, tuple[Job, bool, Claim | None]]:
        """:meth:`start` for a batch's ``(job id, trace)`` deliveries in one statement, each pending row of
        a two-phase kind claimed under a token of its own. An id repeated in ``deliveries`` is started
        once (its first trace kept); an id with no row is missing from the answer (:class:`JobNotFound`
        for the caller). A single-UPDATE run this call marked comes with its mark's token as a
        :class:`Claim` too (for :meth:`release_batch`; its run completes with ``complete_if_pending``)."""
        traces: dict[uuid.UUID, str | None] = {}
        for job_id, trace in deliveries:
            traces.setdefault(job_id, valid_xray_header(trace))
        tokens = {job_id: uuid.uuid4() for job_id in traces}
        params = {
            "ids": list(tokens),
            "tokens": list(tokens.values()),
            "traces": list(traces.values()),
            "worker": self._worker,
            "two_phase": list(two_phase),
            "known": [*two_phase, *single],
        }
        out: dict[uuid.UUID, tuple[Job, bool, Claim | None]] = {}
        for started, *columns in self._tuples("start_batch", params):
            job = Job(*columns)
            token = tokens[job.id]
            if job.status == "processing" and job.claim_token == token:  # claimed now, or by our lost try
                out[job.id] = (job, True, Claim(job, token))
            elif started and job.kind not in two_phase:  # a single-UPDATE run marked (by us: its token)
                out[job.id] = (job, True, Claim(job, token) if job.claim_token == token else None)
            else:
                out[job.id] = (job, False, None)
        return out

    def commit_batch(self, results: Sequence[tuple[Claim, str]]) -> dict[uuid.UUID, LostClaim]:
        """:meth:`commit` for a batch's successes in one statement, each row matched on its own claim's
        token; a result is its JSON text (:func:`~sluice.jobs.rows.serialized`). Returns the claims that
        were lost (reaped, or reaped and claimed again: those rows are left as they are), by job id; a row
        our own earlier try already committed counts as committed."""
        if not results:
            return {}
        params = {
            "ids": [claim.job_id for claim, _ in results],
            "tokens": [claim.token for claim, _ in results],
            "results": [text for _, text in results],
        }
        committed = {row[0] for row in self._tuples("commit_batch", params)}
        missing = [claim for claim, _ in results if claim.job_id not in committed]
        if not missing:
            return {}
        states = {row[0]: row[1:] for row in self._tuples("states", {"ids": [c.job_id for c in missing]})}
        lost: dict[uuid.UUID, LostClaim] = {}
        for claim in missing:
            state = states.get(claim.job_id)
            if state is not None and state[0] == "completed" and state[1] == claim.token:
                continue  # our first try landed; its response was lost with the connection
            lost[claim.job_id] = _lost(claim, *(state or (None, None)))
        return lost

    def release_batch(self, claims: Sequence[Claim]) -> list[uuid.UUID]:
        """Runs whose handler never started, each only under its own token: a two-phase claim → pending
        as before it (attempt - 1), a single-UPDATE run's mark cleared; returns the ids released."""
        if not claims:
            return []
        params = {"ids": [c.job_id for c in claims], "tokens": [c.token for c in claims]}
        return [row[0] for row in self._tuples("release_batch", params)]

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
            if row["status"] != "dead" and row["trace"] is not None:
                reaped.traces[row["id"]] = row["trace"]
        return reaped

    def due_for_retry(self, *, limit: int = 500) -> list[Requeue]:
        """error rows whose retry time has come → pending (``FOR UPDATE SKIP LOCKED``: concurrent
        sweepers never take the same row); returns each with its trace header, to be enqueued."""
        return [Requeue(row["id"], row["trace"]) for row in self._all("due_for_retry", {"limit": limit})]

    def orphans(self, older_than_seconds: float, *, limit: int = 500) -> list[Requeue]:
        """Pending rows untouched for ``older_than_seconds`` (their message was lost, or never sent):
        touched and returned with their trace header, to be enqueued again."""
        params = {"age": float(older_than_seconds), "limit": limit}
        return [Requeue(row["id"], row["trace"]) for row in self._all("orphans", params)]

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
            "error": error_text(str(error)),
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
        raise _lost(
            claim, None if row is None else row["status"], None if row is None else row["claim_token"]
        )

    def _one(self, name: str, params: dict[str, Any]) -> dict[str, Any] | None:
        rows = self._all(name, params)
        return rows[0] if rows else None

    def _tuples(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """A statement's rows as tuples (no dict built per row: the batch path's)."""
        query = self._sql[name]

        def run(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            with conn.cursor() as cur:
                cur.execute(query, params)
                return cur.fetchall() if cur.description is not None else []

        return self._run(name, run)

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


def _lost(claim: Claim, status: str | None, token: uuid.UUID | None) -> LostClaim:
    if status is None:
        state = "gone"
    elif token is None:
        state = f"{status} (its claim was reaped)"
    else:
        state = f"{status} under another claim"
    return LostClaim(f"job {claim.job_id}: claim {claim.token} lost; the job is {state}")
