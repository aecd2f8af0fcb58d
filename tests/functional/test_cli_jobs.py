"""``sluice jobs migrate|stats|show`` against a real PostgreSQL: by URL, and through the stack's secret.

Skipped, with the reason printed, when no PostgreSQL answers.
"""

from __future__ import annotations

import io
import json
import uuid

import boto3
import pytest
from moto import mock_aws

from sluice.jobs import Connector, JobStore, migrations
from sluice_cli.__main__ import main
from sluice_cli.resources import Resources


def run(*argv: str, resources: Resources | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), resources=resources, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def fresh_schema(pg_url):
    from sluice_local.app import postgres  # noqa: PLC0415

    name = f"sluice_t_{uuid.uuid4().hex[:12]}"
    yield name
    postgres.drop_schema(pg_url, name)


def test_migrate_applies_once_then_stats_and_show_read_the_rows(pg_url, fresh_schema, monkeypatch):
    monkeypatch.delenv("SLUICE_DATABASE_URL", raising=False)
    where = ("--database-url", pg_url, "--schema", fresh_schema, "--json")
    # When the operator migrates twice
    first = run("jobs", "migrate", *where)
    again = run("jobs", "migrate", *where)
    # Then every version shipped is applied, once
    assert first[0] == 0
    assert json.loads(first[1])["applied"] == [m.version for m in migrations()]
    assert json.loads(first[1])["applied"][:3] == [1, 2, 3]
    assert json.loads(again[1])["applied"] == []
    store = JobStore(Connector(lambda _r: pg_url), schema=fresh_schema)
    done = store.create("charge").id
    store.commit(store.claim(done), {"ok": True})
    failed = store.create("charge").id
    store.fail(store.claim(failed), "provider down", retry_in=60)
    store.create("charge")
    # And stats counts per status, with the next retry time
    code, out, _ = run("jobs", "stats", *where)
    statuses = json.loads(out)["statuses"]
    assert code == 0
    assert {s: v["jobs"] for s, v in statuses.items()} == {
        "pending": 1, "processing": 0, "completed": 1, "error": 1, "dead": 0,
    }  # fmt: skip
    assert "next_retry" in statuses["error"]
    # And show prints one job with its error history
    code, out, _ = run("jobs", "show", str(failed), *where)
    shown = json.loads(out)
    assert code == 0
    assert shown["status"] == "error"
    assert shown["errors"][0]["error"] == "provider down"
    assert run("jobs", "show", str(uuid.uuid4()), *where)[0] == 1
    assert run("jobs", "show", "not-a-uuid", *where)[0] == 2


def test_the_dsn_comes_from_the_stack_secret_without_a_url(pg_url, fresh_schema, monkeypatch):
    monkeypatch.delenv("SLUICE_DATABASE_URL", raising=False)
    with mock_aws():
        arn = boto3.client("secretsmanager", region_name="us-east-1").create_secret(
            Name="sluice-dev-database",
            SecretString=json.dumps(
                {"host": "127.0.0.1", "port": 5432, "username": "postgres", "dbname": "test"}
            ),
        )["ARN"]
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        resources = Resources("sluice-dev", database_secret_arn=arn, jobs_schema=fresh_schema)
        code, out, err = run("jobs", "migrate", "--json", resources=resources)
    assert code == 0, err
    assert json.loads(out)["database"] == f"secret {arn}"


def test_an_unreachable_database_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("SLUICE_DATABASE_URL", raising=False)
    code, _, err = run("jobs", "stats", "--database-url", "postgresql://postgres@127.0.0.1:1/test")
    assert code == 1
    assert "cannot connect to the job store" in err
