"""The job store's schema: versioned SQL migrations shipped in this package, applied idempotently.

``migrate(conn, schema)`` takes a transaction-scoped advisory lock (so concurrent cold starts or CLI runs
apply each migration once), creates the schema and the bookkeeping table, and applies, in order, every
``migrations/NNN_name.sql`` not yet recorded. Running it again applies nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from psycopg import sql
from psycopg.rows import tuple_row

if TYPE_CHECKING:
    import psycopg

__all__ = ["MIGRATIONS_TABLE", "Migration", "migrate", "migrations"]

MIGRATIONS_TABLE = "sluice_migrations"
_NAME = re.compile(r"^(?P<version>\d{3})_(?P<name>[a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """Every migration shipped in the package, by version."""
    found = []
    for entry in resources.files("sluice.jobs").joinpath("migrations").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match["version"]), match["name"], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration versions: {versions}")
    return found


def migrate(conn: psycopg.Connection[Any], schema: str) -> list[int]:
    """Bring ``schema`` up to date; returns the versions applied now (``[]`` when already current)."""
    applied: list[int] = []
    with conn.transaction():
        # One migrator per schema at a time; the lock ends with the transaction.
        # Nothing here is prepared on the server (prepare=False): it runs once, a migration is several
        # statements (which cannot be prepared), and the search path changes under it.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"sluice.jobs:{schema}",), prepare=False)
        # An index built on a large table outlasts the connection's statement timeout; this transaction
        # alone may take as long as it needs (SET LOCAL ends with it).
        conn.execute("SET LOCAL statement_timeout = 0", prepare=False)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)), prepare=False)
        path = sql.Identifier(schema).as_string()
        conn.execute("SELECT set_config('search_path', %s, true)", (path,), prepare=False)
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(sql.Identifier(MIGRATIONS_TABLE)),
            prepare=False,
        )
        with conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(
                sql.SQL("SELECT version FROM {}").format(sql.Identifier(MIGRATIONS_TABLE)), prepare=False
            )
            done = {int(row[0]) for row in cur.fetchall()}
        for migration in migrations():
            if migration.version in done:
                continue
            conn.execute(migration.sql.encode(), prepare=False)
            conn.execute(
                sql.SQL("INSERT INTO {} (version, name) VALUES (%s, %s)").format(
                    sql.Identifier(MIGRATIONS_TABLE)
                ),
                (migration.version, migration.name),
                prepare=False,
            )
            applied.append(migration.version)
    return applied
