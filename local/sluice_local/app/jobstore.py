"""The job store attached to a local stack: what the emulation knows nothing about, plugged into it.

:class:`JobStoreAttachment` gives the stack a schema of its own in a real PostgreSQL (migrated at start,
dropped on stop) and a secret holding the DSN, passed as ``DatabaseSecretArn`` (``JobsSchema`` names the
schema), so the job functions exist and read the DSN as in AWS; and it frees the job store connections
of every execution environment the runtime drops (:func:`release_connections`).
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn

from sluice_local.app import postgres
from sluice_local.emulation.cloud import DeployError, LocalCloud
from sluice_local.emulation.functions import Handler

__all__ = ["JobStoreAttachment", "release_connections"]

log = logging.getLogger("sluice_local")


class JobStoreAttachment:
    """An :class:`~sluice_local.emulation.cloud.Attachment`: the job store's PostgreSQL at ``url``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.schema: str | None = None

    def __repr__(self) -> str:
        return f"JobStoreAttachment({postgres.redacted(self.url)!r}, schema={self.schema!r})"

    def attach(self, cloud: LocalCloud) -> None:
        reason = postgres.unreachable_reason(self.url)
        if reason is not None:
            raise DeployError(reason)
        self.schema = postgres.new_schema(self.url, prefix="sluice_local_")
        secret = cloud.client("secretsmanager").create_secret(
            Name=f"{cloud.stack_name}-database", SecretString=self.url
        )
        cloud.parameters.setdefault("DatabaseSecretArn", str(secret["ARN"]))
        cloud.parameters["JobsSchema"] = self.schema

    def environment_dropped(self, handler: Handler) -> None:
        release_connections(handler)

    def detach(self) -> None:
        if self.schema is None:
            return
        try:
            postgres.drop_schema(self.url, self.schema)
        except Exception:  # stopping must finish; the schema name is in the log
            log.warning("could not drop job store schema %s", self.schema, exc_info=True)
        self.schema = None


def release_connections(handler: Handler) -> None:
    """What the end of a dropped execution environment frees in AWS (its process is gone): the database
    connections its module holds (the job store's connector, found among the module's objects up to three
    attributes deep). Otherwise each crashed or timed-out environment would keep one open for good.

    The module is the handler's own, not its decorators' (Powertools' wrappers carry their module's
    globals). A released connector refuses to connect again: a timed-out handler's thread keeps running
    here (Lambda stops the process), and its next statement must not open a connection no one closes.
    The closing happens on a thread of its own (:func:`_close`), so the invoking thread reports the
    timeout at once."""
    import psycopg  # noqa: PLC0415 - psycopg only where a job store is

    from sluice.jobs.connection import Connector  # noqa: PLC0415

    module = sys.modules.get(getattr(handler, "__module__", "") or "")
    found = {**getattr(inspect.unwrap(handler), "__globals__", {}), **(vars(module) if module else {})}
    seen: set[int] = set()
    todo: list[tuple[Any, int]] = [(v, 0) for v in found.values()]
    held: list[Callable[[], Any]] = []
    while todo:
        value, depth = todo.pop()
        if id(value) in seen or depth > 3:
            continue
        seen.add(id(value))
        if isinstance(value, psycopg.Connection):
            held.append(functools.partial(_itself, value))
        elif isinstance(value, Connector):
            value.connection = _environment_gone  # type: ignore[method-assign]
            held.append(value.held)  # waits out a connect in progress: its connection is closed too
        elif type(value).__module__.startswith("sluice.") and hasattr(value, "__dict__"):
            todo.extend((v, depth + 1) for v in vars(value).values())
    if held:
        threading.Thread(target=_close, args=(held,), name="jobstore-release", daemon=True).start()


def _itself(conn: Any) -> Any:
    return conn


def _close(held: list[Callable[[], Any]]) -> None:
    """Close each connection once no statement runs on it. psycopg's ``close()`` takes no lock: closing
    under a statement frees the libpq connection the other thread is still reading (a soak worker died
    with SIGSEGV). A running statement is cancelled (the one libpq call made for other threads), and the
    connection closed under ``conn.lock``, which psycopg holds through a statement."""
    for get in held:
        conn = get()
        if conn is None or conn.closed:
            continue
        if not conn.lock.acquire(blocking=False):
            try:
                conn.cancel_safe(timeout=5.0)
            except Exception:  # the statement ends anyway (its statement_timeout): the close waits for it
                log.warning("could not cancel a dropped environment's statement", exc_info=True)
            conn.lock.acquire()
        try:
            conn.close()
        finally:
            conn.lock.release()


def _environment_gone() -> NoReturn:
    import psycopg  # noqa: PLC0415 - psycopg only where a job store is

    raise psycopg.OperationalError("the execution environment is gone (it timed out or crashed)")
