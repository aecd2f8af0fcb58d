"""Faults at the job store's database boundary, for the soak: the injector's statement decisions
(:meth:`~sluice_local.emulation.faults.Injector.db`) applied beneath ``JobStore._run``'s own
reconnect-and-retry, and its commits judged by what their caller gets (the at-least-once window)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import psycopg

from sluice_local.emulation.faults import DB_DROPPED, DB_LOST_RESPONSE, Injector, Undo

__all__ = ["DB_COMMITS", "install_database_boundary", "judged_commits"]

DB_COMMITS = frozenset({"commit", "complete_if_pending", "commit_batch"})
"""The job store's commits, which end a job's run after its side effect (the methods of these names):
their outcome for the caller opens the window, for the jobs each commits."""


def install_database_boundary(injector: Injector) -> Undo:
    """A :data:`~sluice_local.emulation.faults.Boundary`: ``JobStore`` statements and commits through
    ``injector``; returns the undo."""
    from sluice.jobs.store import JobStore  # noqa: PLC0415 - psycopg only where the job store is

    originals = {name: getattr(JobStore, name) for name in ("_run", *sorted(DB_COMMITS))}
    JobStore._run = _faulty_statements(injector, originals["_run"])  # type: ignore[method-assign]
    for name in DB_COMMITS:
        setattr(JobStore, name, judged_commits(injector, originals[name]))

    def undo() -> None:
        for name, method in originals.items():
            setattr(JobStore, name, method)

    return undo


def _faulty_statements(injector: Injector, original: Callable[..., Any]) -> Callable[..., Any]:
    """``JobStore._run`` with each statement attempt decided by ``injector`` (:meth:`Injector.db`)."""

    def db_run(self: Any, name: str, fn: Callable[[Any], Any], *, isolated: bool = True) -> Any:
        def faulty(conn: Any) -> Any:  # each attempt of the store's own retry is decided anew
            kind = injector.db(name)
            if kind == DB_DROPPED:
                conn.close()
                raise psycopg.OperationalError(f"injected {kind}: server closed the connection unexpectedly")
            result = fn(conn)
            if kind == DB_LOST_RESPONSE:
                conn.close()
                raise psycopg.OperationalError(f"injected {kind}: server closed the connection unexpectedly")
            return result

        return original(self, name, faulty, isolated=isolated)

    return db_run


def judged_commits(injector: Injector, original: Callable[..., Any]) -> Callable[..., Any]:
    """A job store commit (``JobStore.commit``, ``complete_if_pending``, ``commit_batch``) judged by what
    its caller gets, for the jobs it commits: returned, it landed; raised (unreachable, or
    :class:`~sluice.errors.LostClaim` when the claim was reaped meanwhile and another run took the job),
    it failed for good — the window, as for a guard. A batch's commit lands for its jobs but the claims
    it reports lost, which fail."""

    def commit(self: Any, *args: Any, **kwargs: Any) -> Any:
        jobs = _committed_jobs(original.__name__, args, kwargs)
        try:
            result = original(self, *args, **kwargs)
        except Exception:  # a crash (BaseException) marks the window where it happens
            injector.committed(ok=False, which=_effects_of(jobs))
            raise
        lost = {str(job_id) for job_id in result} if original.__name__ == "commit_batch" else set()
        injector.committed(ok=True, which=_effects_of(None if jobs is None else jobs - lost))
        if lost:
            injector.committed(ok=False, which=_effects_of(lost))
        return result

    return commit


def _committed_jobs(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> set[str] | None:
    """The ids of the jobs a commit call commits; None when the call names none (then it judges every
    effect its thread has not committed yet)."""
    if method == "commit_batch":
        return {str(claim.job_id) for claim, _text in (args[0] if args else kwargs["results"])}
    named = args[0] if args else kwargs.get("claim", kwargs.get("job_id"))
    job_id = getattr(named, "job_id", named)
    return {str(job_id)} if isinstance(job_id, uuid.UUID) else None


def _effects_of(jobs: set[str] | None) -> Callable[[str], bool] | None:
    """Whether a side effect (ledger ``effect_key``: ``<job id>#<kind>``) is one of these jobs'."""
    if jobs is None:
        return None
    return lambda effect: effect.split("#", 1)[0] in jobs
