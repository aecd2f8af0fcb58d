"""``sluice jobs migrate|stats|show ID``: the Postgres job store (docs/jobs.md).

The database: ``--database-url``, else ``$SLUICE_DATABASE_URL``, else the DSN in the stack's
``DatabaseSecretArn`` secret; the schema: ``--schema``, else the stack's ``JobsSchema`` (``sluice``
with a URL and no stack).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import uuid
from typing import Any

from sluice.errors import JobStoreUnavailable
from sluice.jobs import Connector, JobStore, defaults, dsn_from_secret
from sluice_cli import OK, PARTIAL_FAILURE, USAGE_ERROR, CliError
from sluice_cli.context import Context


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    jobs = sub.add_parser("jobs", help="the Postgres job store", parents=[common])
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument(
        "--database-url",
        default=None,
        help="libpq DSN (default: $SLUICE_DATABASE_URL, else the stack's secret)",
    )
    where.add_argument(
        "--schema", default=None, help="schema of the jobs table (default: the stack's JobsSchema)"
    )
    commands = jobs.add_subparsers(dest="action", required=True, metavar="ACTION")
    migrate = commands.add_parser(
        "migrate", help="apply the job store's migrations (idempotent)", parents=[common, where]
    )
    migrate.set_defaults(func=migrate_command)
    stats = commands.add_parser(
        "stats", help="jobs per status, oldest claim, next retry", parents=[common, where]
    )
    stats.set_defaults(func=stats_command)
    show = commands.add_parser("show", help="one job with its error history", parents=[common, where])
    show.add_argument("job_id", help="the job's id (a UUID)")
    show.set_defaults(func=show_command)


def migrate_command(ctx: Context, args: argparse.Namespace) -> int:
    store, where = _store(ctx, args)
    applied = _call(store.migrate)
    data = {"schema": store.schema, "applied": applied, "database": where}
    ctx.out.emit(data, lambda: ctx.out.fields("Job store migrations", [
        ("schema", store.schema),
        ("applied now", ", ".join(map(str, applied)) or "none (already current)"),
        ("database", where),
    ]))  # fmt: skip
    return OK


def stats_command(ctx: Context, args: argparse.Namespace) -> int:
    store, where = _store(ctx, args)
    stats = _call(store.stats)
    data = {"schema": store.schema, "database": where, "statuses": _jsonable(stats)}
    ctx.out.emit(data, lambda: ctx.out.fields(f"Jobs in {store.schema}", [
        (status, _describe(values)) for status, values in stats.items()
    ]))  # fmt: skip
    return OK


def show_command(ctx: Context, args: argparse.Namespace) -> int:
    try:
        job_id = uuid.UUID(args.job_id)
    except ValueError:
        raise CliError(f"not a job id (UUID): {args.job_id!r}", USAGE_ERROR) from None
    store, _where = _store(ctx, args)
    job = _call(lambda: store.get(job_id))
    if job is None:
        raise CliError(f"no job {job_id} in {store.schema}.jobs", PARTIAL_FAILURE)
    data = _jsonable(dataclasses.asdict(job))
    rows = [(k, str(v)) for k, v in data.items() if k != "errors"]
    rows += [
        (f"error {e.get('attempt')}", f"{e.get('at')} {e.get('worker')}: {e.get('error')}")
        for e in job.errors
    ]
    ctx.out.emit(data, lambda: ctx.out.fields(f"Job {job_id}", rows))
    return OK


def _store(ctx: Context, args: argparse.Namespace) -> tuple[JobStore, str]:
    url = args.database_url or os.environ.get("SLUICE_DATABASE_URL")
    if url:
        schema = args.schema or defaults.SCHEMA
        where = "--database-url" if args.database_url else "$SLUICE_DATABASE_URL"
    else:
        secret = ctx.resources.require("database_secret_arn")
        url = dsn_from_secret(ctx.clients.secretsmanager.get_secret_value(SecretId=secret)["SecretString"])
        schema = args.schema or ctx.resources.require("jobs_schema")
        where = f"secret {secret}"
    return JobStore(
        Connector(lambda _refresh: url, application_name="sluice-cli"), schema=schema, worker="sluice-cli"
    ), where


def _call(fn: Any) -> Any:
    try:
        return fn()
    except JobStoreUnavailable as exc:
        raise CliError(str(exc), PARTIAL_FAILURE) from None


def _describe(values: dict[str, Any]) -> str:
    parts = [f"{values.get('jobs', 0)} jobs"]
    for key, label in (
        ("oldest_claim", "oldest claim"),
        ("next_retry", "next retry"),
        ("oldest_update", "oldest update"),
    ):
        if key in values:
            parts.append(f"{label} {values[key].isoformat(timespec='seconds')}")
    return ", ".join(parts)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value
