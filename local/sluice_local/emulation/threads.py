"""Threads run in a copy of their starter's context (``contextvars``), for the whole process.

The local runtime runs many kinds of work in one process, each on threads of its own; what a piece of
work is (the principal it acts as, :mod:`sluice_local.emulation.iam.acting`; the trace header of the
invocation it runs for, :mod:`sluice_local.emulation.recursion`) is a context variable, and a thread a
handler starts must see the same. Python 3.14 does this itself with ``-X thread_inherit_context=1``.
"""

from __future__ import annotations

import contextvars
import threading

__all__ = ["install_thread_inheritance"]

_lock = threading.Lock()
_installed = False


def install_thread_inheritance() -> None:
    """Threads started from now on run in a copy of their starter's context. Installed once per
    process and never undone: it changes nothing else, and an undo could remove a patch installed on
    top of it later (the fault injector wraps the same methods)."""
    global _installed  # noqa: PLW0603 - one patch per process
    with _lock:
        if _installed:
            return
        _installed = True
        original_start, original_run = threading.Thread.start, threading.Thread.run

        def start(self: threading.Thread) -> None:
            self._sluice_context = contextvars.copy_context()  # type: ignore[attr-defined]
            original_start(self)

        def run(self: threading.Thread) -> None:
            context = getattr(self, "_sluice_context", None)
            if context is None:
                original_run(self)
            else:
                context.run(original_run, self)

        threading.Thread.start = start  # type: ignore[method-assign]
        threading.Thread.run = run  # type: ignore[method-assign]
