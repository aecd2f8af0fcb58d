"""Pure logic of the job store: job messages, secrets, settings, kinds (no database)."""

from __future__ import annotations

import json
import uuid

import pytest

from sluice.errors import ConfigurationError, PermanentError
from sluice.jobs import (
    JobConsumerSettings,
    JobKinds,
    JobSettings,
    dsn_from_secret,
    job_message,
    parse_job_message,
)


def test_a_job_message_round_trips():
    job_id = uuid.uuid4()
    assert parse_job_message(job_message(job_id)) == job_id


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("", "not JSON"),
        ("charge it", "not JSON"),
        ("[1, 2]", "no string job_id"),
        ('{"job_id": 42}', "no string job_id"),
        ('{"id": "6a0f2c1e-1b7d-4c55-9a59-000000000001"}', "no string job_id"),
        ('{"job_id": "../../etc/passwd"}', "not a UUID"),
        ('{"job_id": "' + "a" * 5000 + '"}', "at most 4096 bytes"),
        ('{"job_id": "\\ud800"}', "not a UUID"),
    ],
)
def test_anything_but_a_job_message_is_a_permanent_error(body, reason):
    with pytest.raises(PermanentError, match=reason):
        parse_job_message(body)


def test_a_secret_holds_a_dsn_or_the_rds_json_form():
    assert dsn_from_secret("  postgresql://app@db:5432/jobs \n") == "postgresql://app@db:5432/jobs"
    rds = json.dumps(
        {
            "engine": "postgres",
            "host": "db.example",
            "port": 5432,
            "username": "app",
            "password": "p w'd",
            "dbname": "jobs",
        }
    )
    dsn = dsn_from_secret(rds)
    assert "host=db.example" in dsn
    assert "user=app" in dsn
    assert "dbname=jobs" in dsn
    assert "password='p w\\'d'" in dsn  # quoted, never split into another option
    with pytest.raises(ConfigurationError, match="no 'host'"):
        dsn_from_secret('{"username": "app"}')
    with pytest.raises(ConfigurationError, match="neither a DSN nor JSON"):
        dsn_from_secret("{not json")


def test_settings_need_a_database_and_name_the_variable():
    with pytest.raises(ConfigurationError, match="SLUICE_DATABASE_SECRET_ARN"):
        JobSettings.from_env({})
    with pytest.raises(ConfigurationError, match="SLUICE_JOBS_SCHEMA"):
        JobSettings.from_env(
            {"SLUICE_DATABASE_URL": "postgresql://x", "SLUICE_JOBS_SCHEMA": 'x"; drop table jobs'}
        )
    with pytest.raises(ConfigurationError, match="SLUICE_POISON_QUEUE_URL"):
        JobConsumerSettings.from_env(
            {"SLUICE_DATABASE_URL": "postgresql://x", "SLUICE_ENVELOPE_KEY_SECRET": "k"}
        )
    with pytest.raises(ConfigurationError, match="SLUICE_JOB_BACKOFF_BASE_SECONDS"):
        JobSettings.from_env(
            {
                "SLUICE_DATABASE_URL": "postgresql://x",
                "SLUICE_JOB_BACKOFF_BASE_SECONDS": "100",
                "SLUICE_JOB_BACKOFF_CAP_SECONDS": "10",
            }
        )
    settings = JobSettings.from_env(
        {"SLUICE_DATABASE_SECRET_ARN": "arn:aws:secretsmanager:us-east-1:1:secret:db"}
    )
    assert settings.jobs_schema == "sluice"  # the template's JobsSchema default, and JobStore's
    assert settings.job_lease_seconds == 960  # above the longest job consumer timeout the template allows


def test_kinds_name_their_mode_once():
    kinds = JobKinds()
    kinds.register("charge")(lambda job: None)
    kinds.register("thumbnail", mode="single")(lambda job: None)
    assert kinds.two_phase == ("charge",)
    assert "thumbnail" in kinds
    with pytest.raises(ValueError, match="registered twice"):
        kinds.register("charge")(lambda job: None)
    with pytest.raises(ValueError, match="mode must be"):
        kinds.register("x", mode="sometimes")  # type: ignore[arg-type]
