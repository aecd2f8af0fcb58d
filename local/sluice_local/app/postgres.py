"""The real PostgreSQL the local runtime's job store uses (never a mock: correctness lives there).

``SLUICE_DATABASE_URL`` when set, else 127.0.0.1:5432 as user postgres, database test (how PostgreSQL
runs on the project's machines). Each stack gets its own schema and drops it on stop.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping

import psycopg
from psycopg import sql

from sluice.jobs.schema import migrate

__all__ = [
    "DEFAULT_DATABASE_URL",
    "database_url",
    "drop_schema",
    "new_schema",
    "redacted",
    "unreachable_reason",
]

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/test"


def database_url(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get("SLUICE_DATABASE_URL") or DEFAULT_DATABASE_URL


def unreachable_reason(url: str, *, timeout_seconds: int = 15) -> str | None:
    """None when ``url`` accepts a connection and a query, else why not (for a skip's printed reason).
    A server that is absent refuses at once; the timeout only bounds one that answers slowly, as a loaded
    2-core machine's does while it forks backends for the tests beside this one (3 s was not enough)."""
    try:
        with psycopg.connect(url, connect_timeout=timeout_seconds, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"no PostgreSQL at {redacted(url)} ({first}); set SLUICE_DATABASE_URL to one"
    return None


def new_schema(url: str, prefix: str = "sluice_") -> str:
    """A fresh schema holding the migrated job store; returns its name."""
    name = f"{prefix}{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        migrate(conn, name)
    return name


def drop_schema(url: str, name: str) -> None:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def redacted(url: str) -> str:
    """``url`` without its password (for logs and printed reasons)."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    info.pop("password", None)
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})
