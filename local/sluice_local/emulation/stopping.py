"""A dropped execution environment's threads stop at their next AWS call.

Lambda stops the process of an environment whose invocation timed out or whose runtime exited: nothing
it had not done yet happens. Python cannot stop a thread, so the local runtime tags every thread with the
environment it runs for (the invocation's thread and each thread started from it, at any depth) and, once
the environment is dropped, fails that thread's next AWS call with :class:`EnvironmentStopped`. A
timed-out consumer can then no longer dead-letter, send or write after its deadline, which AWS could never
produce (an e2e run under load once re-drove two DLQ copies of one message that way).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from botocore.client import BaseClient

__all__ = ["Environment", "EnvironmentStopped", "current", "install", "running_for"]


class EnvironmentStopped(BaseException):
    """The environment this thread ran for is gone. A BaseException, so no ``except Exception`` in a
    handler carries on past it, as nothing carries on in a process Lambda stopped."""


class Environment:
    """One execution environment, as far as its threads are concerned: stopped once it is dropped."""

    __slots__ = ("name", "stopped")

    def __init__(self, name: str) -> None:
        self.name = name
        self.stopped = False

    def __repr__(self) -> str:
        return f"Environment({self.name!r}, stopped={self.stopped})"


_owner: dict[int, Environment] = {}
_lock = threading.Lock()


def current() -> Environment | None:
    """The environment the calling thread runs for, if any."""
    return _owner.get(threading.get_ident())


@contextmanager
def running_for(environment: Environment) -> Iterator[None]:
    """The calling thread runs for ``environment`` until the block ends."""
    ident = threading.get_ident()
    with _lock:
        before = _owner.get(ident)
        _owner[ident] = environment
    try:
        yield
    finally:
        with _lock:
            if before is None:
                _owner.pop(ident, None)
            else:
                _owner[ident] = before


def install() -> None:
    """Patch this process (again wherever a patch was undone since, e.g. by the fault injector's undo):
    threads inherit their starter's environment, and an AWS call from a thread of a stopped environment
    raises :class:`EnvironmentStopped` before anything is sent."""
    with _lock:
        if not getattr(threading.Thread.start, _MARK, False):
            threading.Thread.start = _starting(threading.Thread.start)  # type: ignore[method-assign,assignment]
        if not getattr(BaseClient._make_api_call, _MARK, False):  # type: ignore[attr-defined]
            BaseClient._make_api_call = _calling(BaseClient._make_api_call)  # type: ignore[attr-defined]


_MARK = "_sluice_stopping"


def _starting(original_start: Callable[[threading.Thread], None]) -> Callable[[threading.Thread], None]:
    def start(self: threading.Thread) -> None:
        environment = current()
        if environment is not None:
            run = self.run

            def run_for_it() -> None:
                with running_for(environment):
                    run()

            self.run = run_for_it  # type: ignore[method-assign]
        original_start(self)

    setattr(start, _MARK, True)
    return start


def _calling(original_call: Callable[..., Any]) -> Callable[..., Any]:
    def make_api_call(self: BaseClient, api: str, params: dict[str, Any]) -> Any:
        environment = current()
        if environment is not None and environment.stopped:
            raise EnvironmentStopped(
                f"{environment.name}: {api} after the environment was stopped (timed out or exited);"
                " Lambda would have ended its process"
            )
        return original_call(self, api, params)

    setattr(make_api_call, _MARK, True)
    return make_api_call
