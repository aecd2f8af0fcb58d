"""Job mode: an SQS message names a job id; the row decides what happens.

Per job kind, one of the article's two primitives (docs/jobs.md):

- ``single``: run the handler, then ``complete_if_pending`` (one UPDATE … WHERE status = 'pending').
  For side effects that tolerate a repeat: two racing deliveries may both run the handler; exactly one
  completes the row, the other gets :class:`~sluice.errors.AlreadyHandled`.
- ``two_phase``: ``claim`` (pending → processing, new token), run the handler, ``commit`` under the
  token. For side effects that must not repeat: only the claimant runs the handler; a worker whose
  claim was reaped meanwhile gets :class:`~sluice.errors.LostClaim` and changes nothing.

Always-delete: a job that fails is recorded in its row (error with a retry time, or dead) and its
message counts as handled; duplicates and lost claims are handled too. Only the database being
unreachable sends a message back to SQS (``batchItemFailures``). A message that names no job
(malformed, forged, or a job this database does not have) goes to the poison queue.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union

from sluice.errors import (
    AlreadyHandled,
    JobNotFound,
    JobStoreUnavailable,
    LostClaim,
    PermanentError,
    RetryAfter,
    TransientError,
)
from sluice.jobs.rows import serialized, storable
from sluice.logevents import EVENT, LogEvent

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger

    from sluice.jobs.store import Claim, Job, JobStore

__all__ = [
    "Delivery",
    "JobKinds",
    "JobWorker",
    "Mode",
    "OutOfTime",
    "Outcome",
    "Result",
    "job_message",
    "parse_job_message",
]

Mode = Literal["single", "two_phase"]
Handler = Callable[["Job"], Any]
T = TypeVar("T")
Result = Union["Outcome", Exception]
"""A delivery's outcome, or the error that sends its message back to SQS or to the poison queue."""
COMMIT_PATIENCE_SECONDS = 10.0
"""How long a run's last transition is retried while the database is unavailable, without a deadline."""
MAX_JOB_MESSAGE_BYTES = 4096
"""A job message only names a job; anything longer is not one."""


class OutOfTime(TransientError):  # noqa: N818 - reads as the fact it reports
    """The invocation is about to end: a record handed back to SQS without its handler started."""


@dataclass(frozen=True)
class Delivery:
    """One message of a batch: the job it names and its X-Ray trace header."""

    job_id: uuid.UUID
    trace: str | None = None
    log_keys: Mapping[str, str] = field(default_factory=dict)
    """Kept on the worker's log lines about this delivery (the job consumer's: message_id, correlation_id)."""


class Outcome(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    """Recorded as error: the sweeper re-enqueues it when its retry time comes."""
    DEAD = "dead"
    ALREADY_HANDLED = "already_handled"
    LOST_CLAIM = "lost_claim"


@dataclass(frozen=True)
class _Kind:
    handler: Handler
    mode: Mode


class JobKinds:
    """Which handler runs a job kind, and in which mode::

    kinds = JobKinds()

    @kinds.register("charge-card", mode="two_phase")
    def charge(job: Job) -> dict: ...
    """

    def __init__(self) -> None:
        self._kinds: dict[str, _Kind] = {}

    def register(self, kind: str, *, mode: Mode = "two_phase") -> Callable[[Handler], Handler]:
        if mode not in ("single", "two_phase"):
            raise ValueError(f"mode must be 'single' or 'two_phase', got {mode!r}")

        def decorate(handler: Handler) -> Handler:
            if kind in self._kinds:
                raise ValueError(f"job kind {kind!r} is registered twice")
            self._kinds[kind] = _Kind(handler, mode)
            return handler

        return decorate

    def get(self, kind: str) -> _Kind | None:
        return self._kinds.get(kind)

    @property
    def two_phase(self) -> tuple[str, ...]:
        """The kinds that run two-phase (claimed before their handler runs)."""
        return tuple(k for k, v in self._kinds.items() if v.mode == "two_phase")

    @property
    def single(self) -> tuple[str, ...]:
        """The kinds that run single-UPDATE."""
        return tuple(k for k, v in self._kinds.items() if v.mode == "single")

    def __contains__(self, kind: object) -> bool:
        return kind in self._kinds


def job_message(job_id: uuid.UUID | str) -> str:
    """The body of a message that asks a job consumer to look at ``job_id``."""
    return json.dumps({"job_id": str(job_id)}, separators=(",", ":"))


def parse_job_message(body: str) -> uuid.UUID:
    """The job id a message names; :class:`~sluice.errors.PermanentError` for anything else."""
    if len(body.encode("utf-8", "surrogatepass")) > MAX_JOB_MESSAGE_BYTES:
        raise PermanentError(f"a job message is at most {MAX_JOB_MESSAGE_BYTES} bytes; this one is longer")
    try:
        data = json.loads(body)
    except ValueError:
        raise PermanentError('job message is not JSON (expected {"job_id": "<uuid>"})') from None
    raw = data.get("job_id") if isinstance(data, dict) else None
    if not isinstance(raw, str):
        raise PermanentError('job message has no string job_id (expected {"job_id": "<uuid>"})')
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise PermanentError(f"job_id is not a UUID: {raw[:64]!r}") from None


class JobWorker:
    """Runs one job by id in its kind's mode; returns what happened (never raises for a job's own
    failure). Raises :class:`~sluice.errors.JobStoreUnavailable` when the database is unreachable and
    :class:`~sluice.errors.JobNotFound` when there is no such job."""

    def __init__(
        self,
        store: JobStore,
        kinds: JobKinds,
        *,
        logger: Logger | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._store = store
        self._kinds = kinds
        self._log = logger
        self._sleep = sleep

    def run(self, job_id: uuid.UUID, *, deadline: float | None = None, trace: str | None = None) -> Outcome:
        """Run one delivery of ``job_id``. ``deadline`` (``time.monotonic()``): until when the final
        commit or fail may be retried while the database is unavailable (default: 10 s from its first
        try) — the handler has run, so giving up early would have the reaper run it again. ``trace``:
        the delivery's X-Ray header, kept on the job for the messages of its later attempts."""
        # One round trip: a two-phase kind's pending row is claimed at once, a single-UPDATE kind's run
        # is marked in flight, anything else is read.
        kinds = self._kinds
        job, started, claim = self._store.start(
            job_id, two_phase=kinds.two_phase, single=kinds.single, trace=trace
        )
        kind = kinds.get(job.kind)
        if claim is not None and kind is not None:
            return self._settle(job_id, lambda: self._two_phase(claim, kind.handler, deadline))
        return self._unclaimed(job, started, deadline)

    def run_batch(self, deliveries: Sequence[Delivery], *, deadline: float | None = None) -> list[Result]:
        """Run an SQS batch's deliveries: one statement starts them all (each two-phase job claimed under
        its own token), the handlers run in order, one fenced statement commits the successes (a row
        whose claim was reaped meanwhile is refused: :attr:`Outcome.LOST_CLAIM`), each failure is
        recorded as :meth:`run` records it. Returns, per delivery in order, its outcome or the error that
        sends its message back (:class:`~sluice.errors.JobStoreUnavailable`, :class:`OutOfTime`) or to
        the poison queue (:class:`~sluice.errors.JobNotFound`). A job named twice runs once (the repeat
        is already handled). ``deadline``: no handler starts after it (its claim is released), and the
        last transitions are retried until it. Raises :class:`~sluice.errors.JobStoreUnavailable` when
        the batch could not be started."""
        kinds = self._kinds
        started = self._store.start_batch(
            [(d.job_id, d.trace) for d in deliveries], two_phase=kinds.two_phase, single=kinds.single
        )
        results: list[Result] = [Outcome.ALREADY_HANDLED] * len(deliveries)
        runs: list[tuple[int, Job, Claim | None, _Kind]] = []  # in the batch's order
        seen: set[uuid.UUID] = set()
        for i, delivery in enumerate(deliveries):
            entry = started.get(delivery.job_id)
            if entry is None:
                results[i] = JobNotFound(f"no job {delivery.job_id} in {self._store.schema}.jobs")
            elif delivery.job_id in seen:
                self._info("job already handled", delivery.job_id, reason="named twice in one batch")
            else:
                seen.add(delivery.job_id)
                job, was_started, claim = entry
                kind = kinds.get(job.kind)
                if was_started and kind is not None:
                    runs.append((i, job, claim, kind))
                else:  # no handler runs: a kind nobody handles, or a duplicate
                    with self._keys(delivery):
                        results[i] = self._outcome(functools.partial(self._unclaimed, job, False, deadline))
        successes: list[tuple[int, Claim, str]] = []
        unrun: list[tuple[int, Claim | None]] = []
        for i, job, claim, kind in runs:
            if deadline is not None and time.monotonic() >= deadline:
                unrun.append((i, claim))
                continue
            with self._keys(deliveries[i]):
                if kind.mode == "single":
                    results[i] = self._outcome(functools.partial(self._unclaimed, job, True, deadline))
                    continue
                assert claim is not None  # noqa: S101 - a two-phase run is a claim
                ran = self._run_claimed(claim, kind.handler, deadline)
            if isinstance(ran, Outcome | Exception):  # an Outcome is a str too: tested first
                results[i] = ran
            else:
                successes.append((i, claim, ran))
        self._commit_batch(successes, results, deadline, deliveries)
        self._release(unrun, results)
        return results

    @contextlib.contextmanager
    def _keys(self, delivery: Delivery) -> Iterator[None]:
        """The delivery's log keys on every line logged meanwhile."""
        if self._log is None or not delivery.log_keys:
            yield
            return
        self._log.thread_safe_append_keys(**delivery.log_keys)
        try:
            yield
        finally:
            self._log.thread_safe_remove_keys(list(delivery.log_keys))

    def _run_claimed(self, claim: Claim, handler: Handler, deadline: float | None) -> Result | str:
        """A claimed job's handler: its result's JSON text to commit, or what the run came to."""
        try:
            result = handler(claim.job)
        except JobStoreUnavailable as exc:
            return exc  # the claim stays; the reaper takes it back after the lease
        except Exception as exc:  # noqa: BLE001 - a job's failure is recorded in its row
            return self._record_failure(claim, exc, deadline)
        text, problem = serialized(result)
        if problem is not None:
            self._unstorable(claim.job, problem)
        return text

    def _record_failure(self, claim: Claim, exc: Exception, deadline: float | None) -> Result:
        error, retry = _describe(exc), _retry(exc)
        try:
            failed = self._finish(lambda: self._store.fail(claim, error, **retry), deadline)
        except LostClaim as lost:
            return self._lost_claim(claim.job_id, lost)
        except JobStoreUnavailable as down:  # the claim stays; the reaper takes it back after the lease
            return down
        return self._failed(claim.job, exc, failed.status)

    def _commit_batch(
        self,
        successes: list[tuple[int, Claim, str]],
        results: list[Result],
        deadline: float | None,
        deliveries: Sequence[Delivery],
    ) -> None:
        if not successes:
            return
        try:
            lost = self._finish(lambda: self._store.commit_batch([(c, t) for _, c, t in successes]), deadline)
        except JobStoreUnavailable as exc:  # the claims stay; the reaper takes them back after the lease
            for i, _claim, _text in successes:
                results[i] = exc
            return
        for i, claim, _text in successes:
            refused = lost.get(claim.job_id)
            if refused is None:
                results[i] = Outcome.COMPLETED
                continue
            with self._keys(deliveries[i]):
                results[i] = self._lost_claim(claim.job_id, refused)

    def _release(self, unrun: list[tuple[int, Claim | None]], results: list[Result]) -> None:
        """Runs whose handler never started: released (pending again, a single-UPDATE run's own mark
        cleared) and their messages sent back."""
        if not unrun:
            return
        try:
            self._store.release_batch([claim for _, claim in unrun if claim is not None])
        except JobStoreUnavailable as exc:  # still claimed: the reaper takes them back after the lease
            if self._log is not None:
                self._log.warning("unstarted claims not released", extra={"reason": str(exc)})
        for i, _claim in unrun:
            results[i] = OutOfTime("not started: too little of the invocation is left")

    def _unclaimed(self, job: Job, started: bool, deadline: float | None) -> Outcome:
        """A delivery that claimed nothing: a single-UPDATE run, a kind nobody handles, or a duplicate."""
        kind = self._kinds.get(job.kind)
        if started and kind is not None:
            return self._settle(job.id, lambda: self._single(job, kind.handler, deadline))
        if kind is None and job.status == "pending":
            return self._settle(job.id, lambda: self._no_handler(job))
        # the common duplicate: taken, finished or waiting for its retry; no handler ran
        self._info("job already handled", job.id, status=job.status)
        return Outcome.ALREADY_HANDLED

    def _settle(self, job_id: uuid.UUID, run: Callable[[], Outcome]) -> Outcome:
        """``run``'s outcome, a fenced transition that found the job moved on included."""
        try:
            return run()
        except AlreadyHandled as exc:
            self._info("job already handled", job_id, reason=str(exc))
            return Outcome.ALREADY_HANDLED
        except LostClaim as exc:
            return self._lost_claim(job_id, exc)

    def _outcome(self, run: Callable[[], Outcome]) -> Result:
        """``run``'s outcome, or the unavailability that sends the message back (this job's only)."""
        try:
            return run()
        except JobStoreUnavailable as exc:
            return exc

    def _lost_claim(self, job_id: uuid.UUID, exc: LostClaim) -> Outcome:
        if self._log is not None:
            self._log.error(
                "job claim lost; result discarded", extra={"job_id": str(job_id), "reason": str(exc)}
            )
        return Outcome.LOST_CLAIM

    def _single(self, job: Job, handler: Handler, deadline: float | None) -> Outcome:
        try:
            result = handler(job)
        except JobStoreUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - a job's failure is recorded in its row
            error, retry = _describe(exc), _retry(exc)
            failed = self._finish(
                lambda: self._store.fail_if_pending(job.id, error, attempt=job.attempt + 1, **retry),
                deadline,
            )
            return self._failed(job, exc, failed.status)
        stored = self._storable(job, result)
        self._finish(lambda: self._store.complete_if_pending(job.id, stored), deadline)
        return Outcome.COMPLETED

    def _two_phase(self, claim: Claim, handler: Handler, deadline: float | None) -> Outcome:
        try:
            result = handler(claim.job)
        except JobStoreUnavailable:
            raise  # the claim stays; the reaper takes it back after the lease
        except Exception as exc:  # noqa: BLE001 - a job's failure is recorded in its row
            error, retry = _describe(exc), _retry(exc)
            failed = self._finish(lambda: self._store.fail(claim, error, **retry), deadline)
            return self._failed(claim.job, exc, failed.status)
        stored = self._storable(claim.job, result)
        self._finish(lambda: self._store.commit(claim, stored), deadline)
        return Outcome.COMPLETED

    def _finish(self, transition: Callable[[], T], deadline: float | None) -> T:
        """The run's last transition, retried while the database is unavailable until ``deadline`` (at most
        10 s). Every transition is fenced (token or status), so retrying it never overwrites another run's
        outcome (docs/jobs.md says what a retry after a lost answer reports); not retrying would leave the
        claim to the reaper and run the handler again."""
        patience = time.monotonic() + COMMIT_PATIENCE_SECONDS  # one record never takes the whole batch's time
        until = patience if deadline is None else min(deadline, patience)
        pause = 0.05
        while True:
            try:
                return transition()
            except JobStoreUnavailable as exc:
                if time.monotonic() + pause >= until:
                    raise
                if self._log is not None:
                    self._log.warning("job's last transition failed; retrying", extra={"reason": str(exc)})
                self._sleep(pause)
                pause = min(2.0, pause * 2)

    def _storable(self, job: Job, result: Any) -> Any:
        """The result, or a note when jsonb cannot hold it: the job still completes (its side effect ran;
        failing the commit would have it run again)."""
        stored, problem = storable(result)
        if problem is not None:
            self._unstorable(job, problem)
        return stored

    def _unstorable(self, job: Job, problem: str) -> None:
        if self._log is not None:
            self._log.error(
                "job result cannot be stored; completed with a note instead",
                extra={"job_id": str(job.id), "kind": job.kind, "reason": problem},
            )

    def _no_handler(self, job: Job) -> Outcome:
        error = f"no handler is registered for job kind {job.kind!r}"
        self._store.fail_if_pending(job.id, error, attempt=job.attempt + 1, permanent=True)
        if self._log is not None:
            self._log.error(
                "job is dead: unknown kind",
                extra={EVENT: LogEvent.JOB_DEAD, "job_id": str(job.id), "kind": job.kind},
            )
        return Outcome.DEAD

    def _failed(self, job: Job, exc: Exception, status: str) -> Outcome:
        if self._log is not None:
            self._log.warning(
                "job failed" if status == "error" else "job is dead",
                extra={
                    **({EVENT: LogEvent.JOB_DEAD} if status == "dead" else {}),
                    "job_id": str(job.id),
                    "kind": job.kind,
                    "attempt": job.attempt,
                    "error": _describe(exc),
                },
            )
        return Outcome.DEAD if status == "dead" else Outcome.FAILED

    def _info(self, message: str, job_id: uuid.UUID, **extra: Any) -> None:
        if self._log is not None:
            self._log.info(message, extra={"job_id": str(job_id), **extra})


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises still gets recorded
        text = f"<{exc.__class__.__name__} whose message cannot be read>"
    return f"{exc.__class__.__name__}: {text}"


def _retry(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, RetryAfter):
        return {"retry_in": exc.seconds}
    return {"permanent": isinstance(exc, PermanentError)}
