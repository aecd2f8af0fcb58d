"""Faults at the job store's database boundary, for the soak: the injector's statement decisions
(:meth:`~sluice_local.emulation.faults.Injector.db`) applied beneath ``JobStore._run``'s own
reconnect-and-retry, and its commits judged by what their caller gets (the at-least-once window)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from sluice_local.emulation.faults import DB_DROPPED, DB_LOST_RESPONSE, Injector, Undo

__all__ = ["DB_COMMITS", "install_database_boundary", "judged_commits"]

DB_COMMITS = frozenset({"commit", "complete_if_pending"})
"""The job store's commits, which end a job's run after its side effect (the methods of these names):
their outcome for the caller opens the window."""


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
    """A job store commit (``JobStore.commit``, ``complete_if_pending``) judged by what its caller gets:
    returned, it landed; raised (unreachable, or :class:`~sluice.errors.LostClaim` when the claim was
    reaped meanwhile and another run took the job), it failed for good — the window, as for a guard."""

    def commit(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = original(self, *args, **kwargs)
        except Exception:  # a crash (BaseException) marks the window where it happens
            injector.committed(ok=False)
            raise
        injector.committed(ok=True)
        return result

    return commit
